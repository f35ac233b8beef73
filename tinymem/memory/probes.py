"""The allocator's own count, held against the ledger: the *measured* peak.

On NumPy, tracemalloc (NumPy reports its data buffers to it); on CuPy, the memory pool's used
bytes followed through a ``cupy.cuda.MemoryHook``. Both report the growth above the moment the
probe started. Used by :func:`tinymem.memory.track`.
"""
import tracemalloc

from .. import backend


class TracemallocProbe:
    """NumPy reports its data buffers to tracemalloc; we read the peak growth of all traced memory.

    tracemalloc has one peak for the whole process, and a new window must reset it. So the
    probes open now (nested ``track`` windows) each bank the peak reached so far before a reset:
    an inner window never erases what the outer one measured.
    """

    _open = []  # the probes whose windows are open, outermost first

    def __init__(self):
        self.started_here = not tracemalloc.is_tracing()
        if self.started_here:
            tracemalloc.start()
        peak_so_far = tracemalloc.get_traced_memory()[1]
        for outer in TracemallocProbe._open:
            outer.high = max(outer.high, peak_so_far)
        tracemalloc.reset_peak()
        self.base = self.high = tracemalloc.get_traced_memory()[0]
        self.result = None
        TracemallocProbe._open.append(self)

    def stop(self):
        self.result = self.peak()
        if self in TracemallocProbe._open:
            TracemallocProbe._open.remove(self)
        if self.started_here:
            tracemalloc.stop()

    def peak(self):
        if self.result is not None:
            return self.result
        return max(0, max(self.high, tracemalloc.get_traced_memory()[1]) - self.base)


class CupyProbe:
    """Follows the CuPy memory pool's used bytes through a MemoryHook to catch the peak."""

    def __init__(self):
        cupy = backend.get_cupy()
        pool = cupy.get_default_memory_pool()
        probe = self

        class Hook(cupy.cuda.MemoryHook):
            name = f"tinymem_peak_{id(probe)}"  # CuPy refuses two hooks of one name: windows nest

            def alloc_postprocess(self, **kwargs):
                probe.high = max(probe.high, pool.used_bytes())

            def free_postprocess(self, **kwargs):
                probe.high = max(probe.high, pool.used_bytes())

        cupy.cuda.Device().synchronize()
        self.pool, self.base = pool, pool.used_bytes()
        self.high, self.result = self.base, None
        self.hook = Hook()
        self.hook.__enter__()

    def stop(self):
        self.hook.__exit__(None, None, None)
        self.result = self.high - self.base

    def peak(self):
        return self.result if self.result is not None else self.high - self.base
