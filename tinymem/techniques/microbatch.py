"""Micro-batching (gradient accumulation): the gradient of a large batch at the activation
memory of a small one.

Split a batch of N samples into k micro-batches of sizes n_1..n_k, run forward and backward on
each in turn, and let the gradients add up in ``.grad`` before one optimizer step. Only one
micro-batch's activations are alive at a time, so the activation peak drops to about
max(n_i)/N of the full batch's (≈ 1/k); parameters, gradients and optimizer state do not change.
Time: the same flops, in k smaller pieces (slower where small pieces use the hardware less well).

Loss normalisation, the classic pitfall. A mean-reduced loss over the full batch is
L = (1/N) Σ_j l_j. Micro-batch i computes its own mean L_i = (1/n_i) Σ_{j in i} l_j, so

    L = Σ_i (n_i / N) · L_i,

and each micro-batch's backward must be scaled by n_i / N. Scaling by 1/k is right only when all
n_i are equal; with an uneven last micro-batch (N = 10, k = 3: 4, 3, 3) it weights the samples of
the small micro-batches more. A sum-reduced loss needs no scaling at all.

Pitfall two: layers that mix samples (BatchNorm) see micro-batch statistics, so their gradient
is *not* the full-batch gradient; the equality holds for per-sample models (and BatchNorm in
eval mode).
"""
import numpy as np

from ..autograd import Tensor


def split_batch(batch_size, micro_batches=None, micro_batch_size=None):
    """Slices of ``range(batch_size)``: ``micro_batches`` pieces whose sizes differ by at most
    one (as ``numpy.array_split``), or pieces of ``micro_batch_size`` with a smaller last one."""
    if (micro_batches is None) == (micro_batch_size is None):
        raise ValueError("give exactly one of micro_batches (how many) or micro_batch_size (how big)")
    if micro_batch_size is not None:
        if micro_batch_size < 1:
            raise ValueError(f"micro_batch_size must be >= 1, got {micro_batch_size}")
        return [slice(s, min(batch_size, s + micro_batch_size))
                for s in range(0, batch_size, micro_batch_size)]
    if not 1 <= micro_batches <= batch_size:
        raise ValueError(f"micro_batches must be between 1 and the batch size {batch_size}, got {micro_batches}")
    bounds = np.linspace(0, batch_size, micro_batches + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def _take(x, s):
    # A view of the batch: micro-batching must not copy the inputs.
    return Tensor.wrap(x.data[s]) if isinstance(x, Tensor) else x[s]


def accumulate_gradients(loss_fn, batch, micro_batches=None, micro_batch_size=None, reduction="mean"):
    """Backward through ``loss_fn`` one micro-batch at a time; returns the full-batch loss.

    ``batch`` is a tuple of Tensors (or arrays) whose first dimension is the sample;
    ``loss_fn(*micro_batch)`` returns a scalar loss reduced with ``reduction`` ("mean" or "sum")
    over its samples. Gradients are *added* to ``.grad`` (call ``zero_grad()`` before, step the
    optimizer after), scaled so that they equal the gradient of the full-batch loss. The loss
    is read on the host once, at the end (one host sync per call on a GPU).
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    n = len(batch[0])
    if any(len(x) != n for x in batch):
        raise ValueError(f"batch parts have different lengths: {[len(x) for x in batch]}")
    total = 0.0
    for s in split_batch(n, micro_batches, micro_batch_size):
        loss = loss_fn(*[_take(x, s) for x in batch])
        weight = (s.stop - s.start) / n if reduction == "mean" else 1.0
        (loss * weight).backward()
        # Summed on the loss's device, in float64 as Python's floats: the one host read is the
        # returned float, one sync per call, not one per micro-batch (each stalls a GPU).
        total = total + loss.data.reshape(()).astype(np.float64) * weight
        del loss  # drop this micro-batch's graph before the next forward
    return float(total)
