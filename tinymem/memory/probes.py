"""The allocator's own count, held against the ledger: the *measured* peak.

On NumPy, tracemalloc (NumPy reports its data buffers to it); on CuPy, the memory pool's used
bytes, followed allocation by allocation through a ``cupy.cuda.MemoryHook``. Both report the
growth above the moment the probe started. Used by :func:`tinymem.memory.track`.
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
    """Follows every allocation from CuPy's memory pool and every return to it.

    A ``cupy.cuda.MemoryHook`` hears of each block the pool hands out (``malloc_postprocess``)
    and takes back (``free_postprocess``), with its size as the pool counts it (rounded up to
    512 B); their running sum is the pool's used bytes above entry, and its highest value the
    pool's used-bytes peak above entry. (``alloc_postprocess`` would hear only of the blocks the
    pool asks the driver for: none in a warm step, whose blocks all come from the pool's cache;
    on an Adam step of a 4 x 4096 MLP it reported 46 KB of a 151 MB peak.) CuPy calls
    ``malloc_postprocess`` after a failed allocation as well, with ``mem_ptr`` 0: not counted.

    Each probe is a hook of its own name (CuPy refuses two hooks of one name): nested windows
    each follow the same events and keep their own peak. CuPy calls hooks in the thread that
    allocates: an allocation made by another thread is not heard. Memory: none; each event
    costs a Python call.
    """

    def __init__(self):
        cupy = backend.get_cupy()
        probe = self
        self.used = self.high = 0  # the pool's used bytes above entry, now and at most
        self.result = None

        class Hook(cupy.cuda.MemoryHook):
            name = f"tinymem_peak_{id(probe)}"

            def malloc_postprocess(self, **kwargs):
                if not kwargs.get("mem_ptr"):  # CuPy calls this after a failed allocation too, with ptr 0
                    return
                probe.used += kwargs["mem_size"]
                probe.high = max(probe.high, probe.used)

            def free_postprocess(self, **kwargs):
                probe.used -= kwargs["mem_size"]

        self.hook = Hook()
        self.hook.__enter__()

    def stop(self):
        self.hook.__exit__(None, None, None)
        self.result = self.high

    def peak(self):
        return self.result if self.result is not None else self.high
