"""The CUDA side of measuring a PyTorch step: the caching allocator's own account of the step.

Beside the profiler replay (which on CUDA reads the allocator's blocks as the profiler reports
them), two numbers come from the allocator itself over the measured step:

- ``max_allocated``: ``torch.cuda.max_memory_allocated()`` after ``reset_peak_memory_stats()``,
  the allocator's peak of allocated bytes, in its own blocks (rounded up to 512 B);
- ``trace_peak``: the same peak rebuilt from ``torch.cuda.memory._record_memory_history()``'s
  trace (``_snapshot()["device_traces"]``): ``memory_allocated()`` at the start, plus each
  ``alloc``, less each ``free_completed``. It equals ``max_allocated`` when the trace is whole
  (the history keeps at most ``MAX_ENTRIES`` events).

Both are unmeasured on CUDA in this project until a GPU run confirms them. The recording costs
one trace entry (a few hundred bytes of host memory, with its Python stack) per allocation.
"""
import contextlib

MAX_ENTRIES = 1_000_000
BLOCK = 512  # the caching allocator rounds every request up to a multiple of this


def as_blocks(storages, device):
    """``{address: (bytes, bucket)}`` with the bytes a CUDA allocator block holds (unchanged on the CPU)."""
    if device != "cuda":
        return storages
    return {ptr: (-(-nbytes // BLOCK) * BLOCK, bucket) for ptr, (nbytes, bucket) in storages.items()}


class AllocatorRecord:
    """The allocator's numbers for the block (None on the CPU, or until the block ends)."""
    max_allocated = trace_peak = None


def _trace_peak(snapshot, device_index, start):
    live = peak = start
    for event in snapshot["device_traces"][device_index]:
        if event["action"] == "alloc":
            live += event["size"]
            peak = max(peak, live)
        elif event["action"] == "free_completed":
            live -= event["size"]
    return peak


@contextlib.contextmanager
def allocator_record(torch, device):
    """Yield an :class:`AllocatorRecord` filled in when the block ends (on 'cuda'; on the CPU it
    stays empty). Synchronizes before and after, so the block's kernels are inside it, and
    leaves the memory history as it found it: off."""
    record = AllocatorRecord()
    if device != "cuda":
        yield record
        return
    index = torch.cuda.current_device()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_allocated()
    torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, clear_history=True)
    try:
        yield record
        torch.cuda.synchronize()
        record.max_allocated = torch.cuda.max_memory_allocated()
        record.trace_peak = _trace_peak(torch.cuda.memory._snapshot(), index, start)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
