"""Gradient utilities with PyTorch's names (``torch.nn.utils``).

``clip_grad_norm_`` rescales gradients in place so that their global norm is at most
``max_norm``. With loss scaling, clip only after ``scaler.unscale_(optimizer)``, and clip the
tensors the optimizer updates (the fp32 masters under mixed precision): the norm of scaled
gradients is the scale times too large.

Memory: one float32 copy of one gradient at a time for its norm (4 bytes per value of the
largest gradient), no extra persistent bytes.
"""
import math
import numbers
from collections.abc import Iterable

import numpy as np

from .. import backend
from ..autograd import Tensor
from ..checks import true_or_false


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """Scale the ``.grad`` of ``parameters`` in place so their total norm is <= ``max_norm``.

    As PyTorch: total = norm of the per-tensor norms; each grad *= min(1, max_norm /
    (total + 1e-6)). Returns the total norm before clipping (a 0-d float32 Tensor on the
    gradients' device; float64 if a gradient is). Norms are computed in float32 even for float16
    gradients (whose squares would overflow). No host sync (nothing is read on the host) unless ``error_if_nonfinite``,
    whose check reads the norm once, as in PyTorch. ``max_norm`` must be >= 0 (inf: measure the
    norm without clipping); PyTorch takes a negative one (gradients flipped) or NaN (NaN gradients).
    ``foreach`` (True, False or None) picks PyTorch's kernels; taken for its code, it changes nothing here.
    """
    if foreach is not None:
        true_or_false("clip_grad_norm_: foreach", foreach)
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real) or not max_norm >= 0:
        raise ValueError(f"clip_grad_norm_: max_norm must be a number >= 0 (inf to measure the norm "
                         f"without clipping), got {max_norm!r}")
    parameters = _tensors(parameters)
    norm_type = _norm_order(norm_type)
    # A row-sparse gradient (embedding_bag(sparse=True)) is normed and scaled through its values,
    # each row once (coalesced): the zero rows it leaves out add nothing to a positive order's
    # norm, but for -inf and negative orders (the smallest |g| decides) they make it 0, and so
    # they do for any order when no row is stored.
    grads = [p.grad.data for p in parameters if p.grad is not None]
    grads = [g.coalesce_() if getattr(g, "is_sparse", False) else g for g in grads]
    holes = [getattr(g, "is_sparse", False) and len(g.indices) < g.shape[0] for g in grads]
    grads = [g.values if getattr(g, "is_sparse", False) else g for g in grads]
    # A gradient with no value at all (a parameter of size 0) adds nothing: the norm is that of
    # all the values together, as of one concatenated vector, so for no value anywhere it is 0
    # (PyTorch 2.13 raises instead for inf, -inf and negative orders: "the operation does not
    # have an identity"; for the other orders it gives 0 too).
    kept = [(g, hole) for g, hole in zip(grads, holes) if g.size or hole]
    grads = [g for g, _ in kept]
    if not grads:
        return Tensor(np.zeros((), np.float32))  # no gradient value anywhere: a 0 on the default device
    for g in grads:
        if g.dtype.kind != "f":
            raise TypeError(f"clip_grad_norm_: gradient of dtype {g.dtype} (bfloat16 bits?); clip the "
                            "fp32 masters instead: clip_grad_norm_(optimizer.master_params(), max_norm)")
    xp = backend.array_module(grads[0])
    # float32, or float64 when a gradient is (as PyTorch, whose norm has the gradients' dtype).
    acc = np.result_type(np.float32, *(g.dtype for g in grads)).type
    norms = [xp.zeros((), acc) if hole and (norm_type < 0 or not g.size)
             else _vector_norm(xp, xp.abs(g.astype(acc)), norm_type) for g, hole in kept]
    total = _vector_norm(xp, xp.stack(norms), norm_type).astype(acc)
    if error_if_nonfinite and not bool(xp.isfinite(total)):
        raise RuntimeError(f"the total norm of order {norm_type} of the gradients is non-finite, so "
                           "they cannot be clipped; pass error_if_nonfinite=False to clip anyway")
    # The factor stays on the device and is always multiplied in (1 when no clipping is needed),
    # as PyTorch does: deciding on the host whether to clip would read the norm, a host sync per
    # step. It is PyTorch's float32 arithmetic, bit for bit: max_norm / t is computed as
    # reciprocal(t) * max_norm (float64 arithmetic differed in the last bit for a third of norms).
    with np.errstate(over="ignore", divide="ignore"):
        coef = xp.minimum(acc(1) / (total + acc(1e-6)) * acc(max_norm), acc(1))
    with np.errstate(invalid="ignore"):  # an inf norm makes NaN gradients, as in PyTorch
        for g in grads:
            # Multiplied in float32 and rounded once (as PyTorch's float16 * float32 scalar), not
            # by the factor first rounded to float16 (an error of up to an fp16 ulp).
            xp.multiply(g, coef, out=g, casting="unsafe")
    return Tensor(total)


def _tensors(parameters):
    """``parameters`` (a Tensor, or an iterable of them such as ``model.parameters()``) as a list."""
    if isinstance(parameters, Tensor):
        return [parameters]
    if not isinstance(parameters, Iterable) or isinstance(parameters, (str, bytes, dict)):
        raise TypeError("clip_grad_norm_: parameters must be a Tensor or an iterable of Tensors (e.g. "
                        f"model.parameters()), got {type(parameters).__name__}")
    parameters = list(parameters)  # a generator is read once
    for i, p in enumerate(parameters):
        if not isinstance(p, Tensor):
            raise TypeError(f"clip_grad_norm_: parameters must hold Tensors, but item {i} is a "
                            f"{type(p).__name__}; pass model.parameters() (or a list of its Tensors)")
    return parameters


def _norm_order(norm_type):
    """``norm_type`` as a float: a number, or a string that names one ("inf", as PyTorch takes);
    NaN is refused (a NaN norm would make every gradient NaN)."""
    if isinstance(norm_type, bool) or not isinstance(norm_type, (numbers.Real, str)):
        raise TypeError(f"clip_grad_norm_: norm_type must be a number (2.0, 1.0, inf, ...), got {norm_type!r}")
    try:
        order = float(norm_type)
    except ValueError:
        raise ValueError(f"clip_grad_norm_: norm_type must be a number (2.0, 1.0, inf, ...) or 'inf', "
                         f"got {norm_type!r}") from None
    if math.isnan(order):
        raise ValueError("clip_grad_norm_: norm_type must be a number (2.0, 1.0, inf, ...), got NaN: "
                         "a NaN norm would scale every gradient to NaN")
    return order


def _vector_norm(xp, a, order):
    """The ``order``-norm of the non-negative values ``a``, as ``torch.linalg.vector_norm``:
    inf the largest, -inf the smallest, 0 the count of nonzeros, else (sum a^p)^(1/p)."""
    if order == math.inf:
        return a.max()
    if order == -math.inf:
        return a.min()
    if order == 0:
        return xp.asarray(xp.count_nonzero(a), dtype=a.dtype)
    with np.errstate(divide="ignore"):  # a negative order over a zero: inf, then a norm of 0
        return (a ** order).sum() ** (1.0 / order)
