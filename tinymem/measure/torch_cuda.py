"""The CUDA side of measuring a PyTorch step: the caching allocator's blocks and its own peaks.

On CUDA the profiler reports each allocator **block** (``block->size``: the request rounded up to
512 B, or a whole cached block when the allocator hands one out unsplit), at its allocation and
at its free (every free, even of a block made before profiling). So the baseline is the
allocator's own list of active blocks when the step starts (:func:`active_blocks`), every one of
them (``memory_allocated()`` counts them all), the step's objects naming their buckets, and the
replay's peak is in the unit of ``torch.cuda.max_memory_allocated()``.

:func:`allocator_record` takes the allocator's own numbers over the measured step, to hold the
replay against:

- ``max_allocated``: ``max_memory_allocated()`` after ``reset_peak_memory_stats()`` (blocks);
- ``requested_peak``: ``memory_stats()["requested_bytes.all.peak"]`` (the bytes asked for);
- ``trace_peak``: the requested peak rebuilt from ``_record_memory_history()``'s trace
  (``_snapshot()["device_traces"]``, whose sizes are requested bytes): the requested bytes at the
  start, plus each ``alloc``, less each ``free_requested`` (the allocator stops counting a
  block when its free is requested; ``free_completed`` comes later for a block another stream
  still uses). It equals ``requested_peak`` when the trace is whole (at most ``MAX_ENTRIES``).

Unmeasured on CUDA in this project until a GPU run confirms it. The history costs one trace
entry (a few hundred bytes of host memory, with its stack) per allocation.
"""
import contextlib

MAX_ENTRIES = 1_000_000


class AllocatorRecord:
    """The allocator's numbers for the block (None on the CPU, or until the block ends)."""
    max_allocated = requested_peak = trace_peak = None


def active_blocks(torch):
    """``{address: bytes}`` of every allocated block on the current CUDA device."""
    index = torch.cuda.current_device()
    return {b["address"]: b["size"] for seg in torch.cuda.memory_snapshot() if seg["device"] == index
            for b in seg["blocks"] if b["state"] == "active_allocated"}


def baseline_blocks(torch, storages, device):
    """On CUDA: ``{address: (bytes, bucket)}`` of every active block, with the block's own bytes,
    the bucket the step's objects give it ('temporary' for a block none of them names). On the
    CPU: ``storages`` as they are."""
    if device != "cuda":
        return storages
    return {ptr: (nbytes, storages.get(ptr, (0, "temporary"))[1]) for ptr, nbytes in active_blocks(torch).items()}


def _trace_peak(snapshot, device_index, start):
    live = peak = start
    for event in snapshot["device_traces"][device_index]:
        if event["action"] == "alloc":
            live += event["size"]
            peak = max(peak, live)
        elif event["action"] == "free_requested":
            live -= event["size"]
    return peak


@contextlib.contextmanager
def allocator_record(torch, device):
    """Yield an :class:`AllocatorRecord` filled in when the block ends (on 'cuda'; on the CPU it
    stays empty). Synchronizes before and after, so the block's kernels are inside it. It resets
    the allocator's peak statistics and leaves the memory history off and cleared: a history the
    caller was recording is lost (torch has no public way to ask whether one is on)."""
    record = AllocatorRecord()
    if device != "cuda":
        yield record
        return
    index = torch.cuda.current_device()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    start = torch.cuda.memory_stats()["requested_bytes.all.current"]
    torch.cuda.memory._record_memory_history(max_entries=MAX_ENTRIES, clear_history=True)
    try:
        yield record
        torch.cuda.synchronize()
        record.max_allocated = torch.cuda.max_memory_allocated()
        record.requested_peak = torch.cuda.memory_stats()["requested_bytes.all.peak"]
        record.trace_peak = _trace_peak(torch.cuda.memory._snapshot(), index, start)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)
