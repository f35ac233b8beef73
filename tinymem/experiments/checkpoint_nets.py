"""The deep MLP the checkpointing figures and benchmark measure, in tinymem and (as a twin with
the same weights) in PyTorch, with one training step per schedule and a meter for each.

A "layer" is one block Linear(w, w) -> ReLU. Per block and sample it saves the Linear's input
and the ReLU's output: 2·4·w bytes in float32, so 8·B·w·n bytes for n blocks at batch B.
"""
import contextlib
import tracemalloc
import weakref

import numpy as np

from .. import backend, memory, nn, random
from ..autograd import Tensor
from ..memory.probes import CupyProbe, TracemallocProbe
from ..techniques.checkpoint import checkpoint_sequential
from ..techniques.checkpoint.revolve import checkpoint_revolve


@contextlib.contextmanager
def one_thread():
    """NumPy's BLAS and PyTorch on one thread each, for timing with ``time.process_time``: on a
    machine shared with other jobs, CPU time of a one-thread run follows the work itself."""
    try:
        import torch
        before = torch.get_num_threads()
        torch.set_num_threads(1)
    except ImportError:
        torch = None
    try:
        from threadpoolctl import threadpool_limits
        limits = threadpool_limits(1)
    except ImportError:
        limits = contextlib.nullcontext()
    try:
        with limits:
            yield
    finally:
        if torch is not None:
            torch.set_num_threads(before)


def deep_mlp(depth, width, device=None):
    random.manual_seed(0)
    return nn.Sequential(*[nn.Sequential(nn.Linear(width, width, device=device), nn.ReLU())
                           for _ in range(depth)])


def batch(model, size, device=None):
    width = model[0][0].in_features
    data = np.random.default_rng(0).standard_normal((size, width)).astype(np.float32)
    x = Tensor(data, device=device, requires_grad=True)
    return x, np.ones((size, width), np.float32) if x.device == "cpu" else x.data * 0 + 1


def forward(model, x, mode):
    """``mode`` is ("none", 0), ("segments", k) or ("revolve", slots)."""
    kind, count = mode
    if kind == "none":
        return model(x)
    if kind == "segments":
        return checkpoint_sequential(model, count, x)
    return checkpoint_revolve(model, count, x)


def step(model, x, grad, mode):
    """One forward + backward; parameter gradients accumulate into existing buffers. On a GPU it
    waits for the queued kernels, so that a timer around it sees the work."""
    out = forward(model, x, mode)
    out.backward(grad)
    synchronize(x)


def synchronize(x):
    """Wait for the GPU's queued kernels (nothing to wait for on the CPU)."""
    if x.device == "cuda":
        backend.get_cupy().cuda.Device().synchronize()


def keep_grads(model, x, grad):
    """Run one step so that every ``.grad`` exists, then zero it in place (measurements inside a
    window then see activations, not the first allocation of the gradients)."""
    step(model, x, grad, ("none", 0))
    model.zero_grad(set_to_none=False)
    x.grad = None


def measure_memory(model, x, grad, mode, measure=True):
    """Ledger activation peak, ledger growth and allocator growth (``None`` unless ``measure``)
    of one step, in bytes.

    The allocator's growth is read over further runs of the step (the smaller of two), outside the ledger's window:
    the window keeps its own records (the arrays live on entry, the events since the peak), one
    per array, so with the parameters they grow with the depth, and tracemalloc would count
    them as the step's (at 256 blocks they were most of what tracemalloc saw above the ledger).
    """
    # tracemalloc must already trace the gradient buffers born in keep_grads: freeing a buffer
    # it never saw allocated would not lower its count, and the growth would include them.
    start_here = measure and x.device == "cpu" and not tracemalloc.is_tracing()
    if start_here:
        tracemalloc.start()
    try:
        if measure:
            keep_grads(model, x, grad)
        with memory.track(measure=False, timeline=False, device=x.device) as t:
            step(model, x, grad, mode)
        measured = None
        if measure:
            # The smaller of two runs: now and then a run rebuilds one of the ledger's Python tables
            # (a dict holds its old and new table at once while it grows or sheds deleted slots),
            # a few KB that tracemalloc counts as the step's; the next run does not repeat it.
            peaks = []
            for _ in range(2):
                x.grad = None  # as in the ledger's run: the step makes the input's gradient
                probe = CupyProbe() if x.device == "cuda" else TracemallocProbe()
                try:
                    step(model, x, grad, mode)
                finally:
                    probe.stop()
                peaks.append(probe.peak())
            measured = min(peaks)
    finally:
        if start_here:
            tracemalloc.stop()
    x.grad = None
    return {"activation_peak": t.max_by_bucket()["activation"], "ledger_peak_delta": t.peak_delta(),
            "measured_peak_delta": measured}


# -- PyTorch twin ----------------------------------------------------------------------------------
def torch_twin(model):
    import torch
    blocks = []
    for block in model:
        lin = torch.nn.Linear(block[0].in_features, block[0].out_features)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(block[0].weight.numpy()))
            lin.bias.copy_(torch.from_numpy(block[0].bias.numpy()))
        blocks.append(torch.nn.Sequential(lin, torch.nn.ReLU()))
    return torch.nn.Sequential(*blocks)


def torch_step(model, x, grad, segments):
    """PyTorch's step: plain (segments 1) or ``torch.utils.checkpoint.checkpoint_sequential``
    (reentrant, the variant tinymem's node mirrors)."""
    from torch.utils.checkpoint import checkpoint_sequential as torch_cs
    out = model(x) if segments == 1 else torch_cs(model, segments, x, use_reentrant=True)
    out.backward(grad)


class TorchSavedBytes:
    """Peak bytes of tensors PyTorch saves for backward (parameters excluded), by storage,
    followed through ``torch.autograd.graph.saved_tensors_hooks``: PyTorch on the CPU has no
    allocator statistics, so this is its counterpart of the ledger's activation bucket."""

    def __init__(self, model):
        self.params = {p.untyped_storage().data_ptr() for p in model.parameters()}
        self.live, self.peak, self.refs = 0, 0, {}

    def pack(self, t):
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if key in self.params:
            return t
        if key not in self.refs:
            self.refs[key] = 0
            self.live += storage.nbytes()
            self.peak = max(self.peak, self.live)
        self.refs[key] += 1
        holder = _Held(t)
        weakref.finalize(holder, self._drop, key, storage.nbytes())
        return holder

    def _drop(self, key, nbytes):
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.live -= nbytes

    @staticmethod
    def unpack(packed):
        return packed.t if isinstance(packed, _Held) else packed


class _Held:
    __slots__ = ("t", "__weakref__")

    def __init__(self, t):
        self.t = t


def torch_activation_peak(model, x, grad, segments):
    import torch
    meter = TorchSavedBytes(model)
    with torch.autograd.graph.saved_tensors_hooks(meter.pack, meter.unpack):
        torch_step(model, x, grad, segments)
    x.grad = None
    return meter.peak


# -- whole models: none, full recomputation, sqrt(n) segments, selective -----------------------------
SAVE_MATMULS = ("linear", "matmul", "conv2d")  # the selective policy: keep what is expensive to redo
# (vocab, context T, d_model, heads h, blocks, batch). Long context, many heads: the h·T attention
# weights per token outweigh the 17·d values a block saves besides them, as in the large models
# selective recomputation was made for (Korthikanti et al.: 5·h·T / d > 34 there; the full size
# has 5·16·256 / 256 = 80, as GPT-3 175B with 96 heads, T 2048, d 12288). d is large enough that
# the projections take most of the forward's time, as in those models; at d = 128 (8 heads)
# NumPy's memory-bound softmax costs as much as the projections, and recomputing it (what
# selective recomputation does) cost 0.5-0.78 of full recomputation's overhead.
TRANSFORMER = {"quick": (16, 64, 32, 4, 4, 2), "full": (32, 256, 256, 16, 8, 2)}


def transformer_problem(quick, device=None):
    """A Transformer LM and a batch of token ids: (model, run(strategy) -> loss)."""
    from ..models import TransformerLM
    from ..techniques.checkpoint import checkpoint, checkpoint_sequential
    vocab, context, d, heads, layers, size = TRANSFORMER["quick" if quick else "full"]
    random.manual_seed(0)
    lm = TransformerLM(vocab, context, d_model=d, n_heads=heads, n_layers=layers, device=device)
    ids = np.random.default_rng(0).integers(0, vocab, (size, context + 1))

    def blocks(h, strategy):
        if strategy == "none":
            return lm.blocks(h)
        if strategy == "sqrt(n) segments":
            return checkpoint_sequential(lm.blocks, "sqrt", h)
        policy = SAVE_MATMULS if strategy == "selective" else None
        for block in lm.blocks:
            h = checkpoint(block, h, policy=policy)
        return h

    def loss(strategy):
        from .. import functional as F
        logits = lm.logits(blocks(lm.embed(ids[:, :-1]), strategy))
        return F.cross_entropy(logits.reshape(-1, vocab), ids[:, 1:].reshape(-1))

    name = f"Transformer LM, {layers} blocks, d {d}, T {context}, batch {size}"
    return name, lm, loss


def unet_problem(quick, device=None):
    """A U-Net and a batch of phantoms: (model, run(strategy) -> loss); every block is one
    checkpoint (its skip connections make the blocks no chain, so there are no sqrt segments)."""
    import functools

    from ..data import phantoms
    from ..models import UNet, segmentation_loss
    from ..techniques.checkpoint import checkpoint
    base, depth, res, size = (4, 3, 32, 2) if quick else (8, 4, 96, 4)
    random.manual_seed(0)
    net = UNet(base=base, depth=depth, device=device)
    x, y = phantoms.make_phantoms(size, res, seed=0)
    strategies = {"none": None, "full recompute": checkpoint,
                  "selective": functools.partial(checkpoint, policy=SAVE_MATMULS)}

    def loss(strategy):
        net.checkpoint_fn = strategies[strategy]
        return segmentation_loss(net(Tensor(x, device=device)), y)

    return f"U-Net, depth {depth}, base {base}, {res}x{res}, batch {size}", net, loss


def model_activation_peak(model, loss, strategy):
    """The ledger's activation peak of one step (bytes); gradients exist before the window."""
    loss(strategy).backward()
    model.zero_grad(set_to_none=False)
    with memory.track(measure=False, timeline=False) as t:
        loss(strategy).backward()
    return t.max_by_bucket()["activation"]
