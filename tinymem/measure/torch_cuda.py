"""The CUDA side of measuring a PyTorch step: the caching allocator's own peak over the step.

``torch.cuda.reset_peak_memory_stats()`` before the measured step and
``torch.cuda.max_memory_allocated()`` after it give the allocator's peak of allocated bytes,
in its own blocks (rounded up to 512 B), beside the profiler replay's peak of requested bytes.
Unmeasured on CUDA in this project until a GPU run confirms it.
"""
import contextlib


class _Value:
    value = None


@contextlib.contextmanager
def peak_stats(torch, device):
    """Yield a holder whose ``value`` is, after the block, ``max_memory_allocated`` over it on
    ``device`` 'cuda' (None on the CPU). Synchronizes before and after, so that the kernels of
    the block are inside it."""
    out = _Value()
    if device != "cuda":
        yield out
        return
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    yield out
    torch.cuda.synchronize()
    out.value = torch.cuda.max_memory_allocated()
