"""Measure one PyTorch training step's memory: the peak, the buckets at the peak, the op there.

``measure_torch_step(step, model=model, optimizer=opt, inputs=(x, y))`` runs ``step()`` (forward,
loss, backward, ``optimizer.step()``, ``zero_grad``) ``steps`` times and measures the last run,
when the optimizer state exists. The answer, a :class:`TorchStepMemory`, counts every byte alive
when that step starts (the **baseline**: parameters, buffers, optimizer state, leftover ``.grad``,
the ``inputs`` tensors, and whatever the step before left alive) plus the step's own allocations.

**The method, on the CPU.** PyTorch's profiler with ``profile_memory=True`` (CPU activity, no
shapes, no stacks) records every allocation and free of c10's CPU allocator with its address,
signed bytes and time, inside the op that made it. It is opened as
``torch.autograd.profiler.profile(use_kineto=True)``, the profiler that ``torch.profiler.profile``
wraps: the wrapper's first use imports ``torch._inductor`` (8 s on a shared 2-core machine). The replay (``torch_replay.py``) adds them to the baseline in
time order; the peak is the highest total. Buckets come from addresses, not from
``torch.profiler._memory_profiler``: that private categorizer needs ``record_shapes`` and
``with_stack`` (slower, and it infers categories from the graph after the fact), while the step's
own objects name parameters, buffers, optimizer state and inputs, and two hooks mark saved
tensors and accumulated gradients on the profiler's clock (``torch_profile.py``).

**Limits.** The bytes are what the allocator was asked for (``nbytes`` of each storage): the
CPU allocator's alignment (64 B) and malloc's own headers are not in them, nor is memory that
does not pass through c10's allocator (oneDNN scratchpads, OpenMP and Python objects), nor
allocations on a thread the profiler does not follow (one the step starts itself). A storage
made before the step before the measured one and freed during the measured one is noticed late
(``missed_free_bytes``). Under ``torch.utils.checkpoint(use_reentrant=False)`` the tensors
recomputed in backward are saved by checkpoint's own hooks, which hide these: they count as
``in_flight`` (``temporary`` if freed inside the node that recomputed them), not ``activation``;
``use_reentrant=True`` reruns a plain forward in backward, whose saved tensors are activations.
The two hooks cost one empty ``record_function`` per saved tensor and per parameter, which moves
no byte (a test holds the peak with and without them equal). One measurement runs at a time: a second one
started while it runs (in another thread) is refused, as two profilers at once crash the process.

**On CUDA** (``device="cuda"``) the same replay reads the profiler's CUDA allocations, which are
the caching allocator's blocks; the baseline is every active block (``torch_cuda.py``), so the
peak is in the unit of ``max_memory_allocated``, which the result carries beside it, with the
requested-bytes peak and its rebuild from ``_record_memory_history``'s trace. It is unmeasured
on CUDA in this project until a GPU run confirms it; the result says so.

Memory and time: the profiler keeps one record per op and per allocation of the last two steps
(about 100 bytes each) and slows small ops several times; measure a small configuration.
"""
import gc
import threading
from dataclasses import dataclass, field

from ..checks import positive_int
from ..memory.recording import Recording
from ..memory.units import format_bytes
from .torch_profile import Profile, StepHooks, leaves, state_storages
from .torch_replay import BUCKETS, label_in_flight, phase_at, replay

CUDA_NOTE = "unmeasured on CUDA in this project until a GPU run confirms it"
# One measurement at a time: two torch profilers opened at once in two threads crash the process.
_RUNNING = threading.Lock()


@dataclass
class TorchStepMemory:
    """One measured PyTorch step. Bytes throughout; ``buckets`` add up to ``peak``.

    ``peak``: the most bytes alive at once during the step (baseline included). ``baseline``: bytes
    alive when it started. ``buckets``: bytes per bucket at the peak: parameter, buffer, gradient
    (``.grad`` of parameters), optimizer (state), input (the ``inputs``), activation (saved for
    backward), in_flight (gradients between backward nodes), temporary (the rest: op workspaces,
    unsaved intermediates, what the caller keeps). ``op_at_peak``: the op whose allocation reached
    the peak; ``node_at_peak``: the backward node it ran in (None in forward and the optimizer);
    ``phase_at_peak``: 'forward', 'backward' or 'optimizer'. :attr:`events`: the step's allocations
    and bucket changes, which :meth:`export_page` and :meth:`export_snapshot` draw."""
    peak: int
    baseline: int
    buckets: dict
    op_at_peak: str
    node_at_peak: str
    phase_at_peak: str
    device: str
    method: str
    missed_free_bytes: int = 0
    allocator_peak: int = None  # CUDA: torch.cuda.max_memory_allocated over the step (blocks)
    allocator_requested_peak: int = None  # CUDA: the allocator's peak of requested bytes
    allocator_trace_peak: int = None  # CUDA: the requested peak rebuilt from _record_memory_history
    note: str = ""
    rows: tuple = field(default=((), (), ()), repr=False)  # (entered, events, marks): see recording()
    at_peak: list = field(default_factory=list, repr=False)  # (bytes, bucket, op, where) alive at the peak

    def top(self, n=10):
        """The ``n`` largest blocks alive at the peak, largest first: dicts of bytes, bucket, op
        (the op that made it) and where (the phase, and the backward node, it was made in)."""
        n = positive_int("top: n (how many blocks)", n)
        return [dict(zip(("bytes", "bucket", "op", "where"), row)) for row in self.at_peak[:n]]

    @property
    def events(self):
        """The step's allocations, frees and bucket changes: ``(time s, +-bytes, bucket, op, description)``."""
        return self.rows[1]

    def recording(self):
        """The step as a :class:`~tinymem.memory.recording.Recording`: the baseline's arrays, the
        events and the phase marks, in this result's buckets."""
        entered, events, marks = self.rows
        return Recording(BUCKETS, entered, events, marks)

    def export_page(self, path, title="one PyTorch training step"):
        """Write the step as tinymem's timeline page: memory stacked by bucket, the phases, the peak."""
        self._drawable().export_page(path, title)

    def export_snapshot(self, path, at="end"):
        """Write the step as PyTorch's memory snapshot (``at`` 'end' or 'peak'), for pytorch.org/memory_viz.
        The addresses are laid out by tinymem's first-fit model, not the allocator's."""
        self._drawable().export_snapshot(path, at)

    def _drawable(self):
        if not self.events:  # the Tracker's own refusal would tell the user to fix a with-block
            raise ValueError(f"the measured step allocated nothing (peak = baseline = {self.peak:,d} B): "
                             "there is no timeline to draw; export a step that makes tensors")
        return self.recording()

    def __str__(self):
        rows = "\n".join(f"  {b:<11}{n:>16,d} B" for b, n in self.buckets.items() if n)
        where = self.op_at_peak + (f" in {self.node_at_peak}" if self.node_at_peak else "")
        return (f"peak {self.peak:,d} B ({format_bytes(self.peak)}) in {self.phase_at_peak}, at {where}; "
                f"baseline {self.baseline:,d} B\n{rows}" + (f"\n({self.note})" if self.note else ""))


def _check(step, model, optimizer, steps, inputs, device):
    if not callable(step):
        raise TypeError(f"measure_torch_step: step must be a function that runs one training step, "
                        f"got {type(step).__name__}")
    import torch
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"measure_torch_step: model= must be the torch.nn.Module the step trains, "
                        f"got {type(model).__name__}")
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"measure_torch_step: optimizer= must be the torch.optim.Optimizer the step "
                        f"uses, got {type(optimizer).__name__}")
    held = {id(p) for p in model.parameters()}
    outside = list({id(p): p for g in optimizer.param_groups for p in g["params"] if id(p) not in held}.values())
    if outside:  # their bytes would be in no bucket, and their gradients not marked
        raise ValueError(f"measure_torch_step: optimizer= updates {len(outside)} tensors "
                         f"({sum(p.nbytes for p in outside):,d} B) that model= does not hold; give as model= "
                         "the module that holds every tensor the optimizer updates (e.g. torch.nn.ModuleList)")
    steps = positive_int("measure_torch_step: steps (how many steps to run; the last is measured)", steps)
    stray = next((v for v in leaves(inputs) if not isinstance(v, torch.Tensor)), None)
    if stray is not None:
        raise TypeError(f"measure_torch_step: inputs= holds a {type(stray).__name__} ({stray!r:.40}); give the "
                        "tensors the step reads, alone or in tuples, lists and dicts")
    if device is None:
        device = next((p.device.type for p in model.parameters()), "cpu")
    try:
        device = torch.device(device).type if isinstance(device, (str, torch.device)) else device
    except RuntimeError:  # a name torch does not know ('xyz'): refused below, naming the argument
        pass
    if device not in ("cpu", "cuda"):
        raise ValueError(f"measure_torch_step: device must be 'cpu' or 'cuda' (or None: the model's), got {device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("measure_torch_step: device='cuda' but torch sees no CUDA GPU "
                           "(torch.cuda.is_available() is False); measure on the CPU with device='cpu'")
    on = sorted({p.device.type for p in model.parameters()})
    if on and device not in on:  # the step's memory would be elsewhere: nothing of it measured
        raise ValueError(f"measure_torch_step: model= has no parameter on device={device!r} (its parameters "
                         f"are on {', '.join(on)}); give device=None to measure where the model is")
    return torch, steps, device


def measure_torch_step(step, *, model, optimizer, steps=2, inputs=(), device=None):
    """Run ``step()`` ``steps`` times and measure the last run: a :class:`TorchStepMemory`.

    ``step()`` runs one whole training step; what it returns is kept alive until the measured
    step ends (as a caller that holds the logits does) and dropped between steps. ``inputs``:
    tensors (or nests of them) alive throughout that the step reads, counted in the baseline.
    ``device``: 'cpu' or 'cuda' (None: the model's). ``model`` holds every tensor the optimizer
    updates (its state is counted from them). The model and optimizer are left as the
    steps leave them; the hooks are removed. See the module's docstring for the method and limits.
    """
    torch, steps, device = _check(step, model, optimizer, steps, inputs, device)
    if not _RUNNING.acquire(blocking=False):
        raise RuntimeError("measure_torch_step: another measure_torch_step is running (in another thread, or "
                           "the step calls it); torch's profiler measures one step at a time: measure one after the other")
    try:
        return _measure(torch, step, model, optimizer, steps, inputs, device)
    finally:
        _RUNNING.release()


def _measure(torch, step, model, optimizer, steps, inputs, device):
    from torch.autograd.profiler import profile, record_function
    from . import torch_cuda
    for _ in range(steps - 2):
        step()
    gc.collect()  # cycles the earlier steps left must not die inside the measured one
    params = list(model.parameters())  # the optimizer's among them (checked), and any it leaves alone
    # CPU activity alone: allocations are recorded on the host side, CUDA's included.
    with profile(use_kineto=True, use_cpu=True, profile_memory=True, record_shapes=False, with_stack=False) as prof:
        if steps > 1:  # profiled so that what it leaves is seen from birth
            with record_function("tinymem::previous_step"):
                pass
            step()
            gc.collect()
        known = torch_cuda.baseline_blocks(torch, state_storages(torch, model, optimizer, inputs, device), device)
        with torch_cuda.allocator_record(torch, device) as allocator:
            with record_function("tinymem::measured_step"):
                pass
            with StepHooks(torch, params):
                kept = step()
        at_end = state_storages(torch, model, optimizer, inputs, device)
    del kept  # after the profile: what the step returns stays alive to its end, as the caller keeps it
    record = Profile(torch, prof, device, "tinymem::measured_step", known, at_end)
    return _result(record, device, allocator)


def _result(record, device, allocator):
    label_in_flight(record.blocks, record.optimizer_start)
    peak = replay(record.baseline, record.blocks, record.start)
    block = peak.block
    phase = phase_at(peak.time, record.backward_start, record.optimizer_start)
    cuda = device == "cuda"
    return TorchStepMemory(
        peak=peak.nbytes, baseline=sum(b.nbytes for b in record.baseline), buckets=peak.buckets,
        op_at_peak="(step start)" if block is None else block.op,
        node_at_peak=None if block is None else block.node, phase_at_peak=phase, device=device,
        method="torch.profiler allocation replay" + (" + torch.cuda memory stats" if cuda else ""),
        missed_free_bytes=record.missed_free_bytes, allocator_peak=allocator.max_allocated,
        allocator_requested_peak=allocator.requested_peak, allocator_trace_peak=allocator.trace_peak,
        note="; ".join(([CUDA_NOTE] if cuda else []) + ([
            f"{record.missed_free_bytes:,d} B made before profiling were freed unseen: the peak may count up "
            "to that many bytes too many (steps >= 2 profiles what the step before leaves)"]
            if record.missed_free_bytes else [])),
        rows=_rows(record), at_peak=sorted(
            ((b.nbytes, b.bucket_at(peak.time), b.op, _where(record, b)) for b in peak.live), key=lambda r: -r[0]))


def _where(record, block):
    """The phase a block was made in, and its backward node: 'backward: MmBackward0'."""
    if block.born <= record.start:
        return "before the step"
    phase = phase_at(block.born, record.backward_start, record.optimizer_start)
    return phase + (f": {block.node}" if block.node else "")


def _rows(record):
    """``(entered, events, marks)`` for :class:`~tinymem.memory.recording.Recording`: the baseline's
    arrays, then the step's births, deaths and bucket changes as ``(time s, +-bytes, bucket, op,
    description)`` (a change is a free and then a birth at one instant; at one instant births come
    before deaths, the higher total, as the peak counts it), and the phases' starts."""
    rows, entered = [], []
    for b in list(record.baseline) + list(record.blocks):
        changes = [max(b.born, record.start)]
        for t in sorted({t for t, _ in b.labels if t > changes[0]}):
            if b.bucket_at(t) != b.bucket_at(changes[-1]):
                changes.append(t)
        for i, (t0, t1) in enumerate(zip(changes, changes[1:] + [b.died])):
            bucket = b.bucket_at(t0)
            if b.born > record.start or i:
                rows.append((t0, 1, b.nbytes, bucket, b.op, _where(record, b)))
            else:
                entered.append((b.nbytes, bucket, b.op, _where(record, b)))
            if t1 is not None:
                rows.append((t1, 0 if i + 1 < len(changes) else 2, -b.nbytes, bucket, b.op, _where(record, b)))
    rows.sort(key=lambda r: r[:2])
    events = [((t - record.start) / 1e9, nbytes, bucket, op, what) for t, _, nbytes, bucket, op, what in rows]
    marks = [((t - record.start) / 1e9, phase) for t, phase in
             ((record.backward_start, "backward"), (record.optimizer_start, "optimizer")) if t is not None]
    return entered, events, marks
