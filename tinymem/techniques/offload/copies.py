"""Asynchronous copies between the host and a GPU, for the offload stores (``store.py``).

A copy queued on a CUDA stream returns before it has moved a byte: its source must stay alive
(and unchanged) until the copy is done, and the compute that reads its destination must wait
for it. :class:`CopyStream` orders copies on a stream of their own against the compute stream;
:class:`InFlight` keeps each source until the event recorded after its copy says it is done;
:func:`pinned_empty` makes the page-locked host buffers such copies need to be asynchronous.
Memory: none of its own; the buffers kept are those of copies still running.
"""
from collections import deque

from ... import backend


def pinned_empty(shape, dtype):
    """A page-locked host array (CuPy's pinned memory pool): copies from it can be asynchronous."""
    return backend.get_cupyx().empty_pinned(shape, dtype)


class InFlight:
    """Buffers that asynchronous copies still read: each is kept until its CUDA event says the
    copy finished. Dropped earlier, a device source could be freed and overwritten, and a pinned
    host buffer handed by CuPy's pinned pool to the next load, whose read would overwrite it
    before the GPU had copied it."""

    def __init__(self):
        self._pairs = deque()

    def add(self, event, buffer):
        self._pairs.append((event, buffer))
        while self._pairs and self._pairs[0][0].done:
            self._pairs.popleft()  # finished copies release their buffers

    def wait(self):
        for event, _ in self._pairs:
            event.synchronize()
        self._pairs.clear()


class CopyStream:
    """A CUDA stream for host<->device copies, ordered against the compute (current) stream."""

    def __init__(self):
        self.cupy = backend.get_cupy()
        self.stream = self.cupy.cuda.Stream(non_blocking=True)

    def after_compute(self):
        # The copy must not start before the kernels that wrote (or last read) the buffer.
        self.stream.wait_event(self.cupy.cuda.get_current_stream().record())

    def record(self):
        return self.stream.record()

    def hand_over(self, event):
        # Compute kernels that use the copied array wait for the copy, without blocking Python.
        self.cupy.cuda.get_current_stream().wait_event(event)
