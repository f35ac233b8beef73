"""A pool of host buffers that offloaded arrays reuse from one step to the next.

Activation offload copies every saved tensor of every step to the host. Into a fresh array
each time, that is a fresh allocation per tensor (on CuPy a page-locked one, which is slow to
make); into a buffer kept from the last step, it is only the copy.

``take(like)`` lends an array (a *lease*) backed by an idle buffer of exactly its byte
size, or by a new one. The buffer comes back when the lease and every view of it are gone
(the graph that saved it was freed, after backward or when dropped), never while anything can
still read it; on CuPy it is reused only once the copies that used it have finished.

Memory: the ledger counts a lent buffer through its lease, in the caller's bucket at place
``host``, and an idle one in ``workspace`` at place ``host`` (label ``"host pool"``):
``idle_bytes`` is memory the process holds for the next step. In steady training the pool holds
one step's saved bytes. It never grows without bound: :meth:`new_step` (every ``save_on_host``
block calls it) frees the idle buffers the previous step did not take, and :meth:`empty`
(:func:`empty_host_pool`) frees every idle buffer now and lets the lent ones be freed, instead of
kept, when their leases die.
"""
import ctypes
import weakref

import numpy as np

from ... import backend, memory


class _Buffer:
    """One pooled allocation: flat bytes, pinned or not, and the last copy that used it."""

    __slots__ = ("raw", "window", "pinned", "event", "taken")

    def __init__(self, nbytes, pinned):
        if pinned:
            self.raw = backend.get_cupyx().empty_pinned((nbytes,), np.uint8)
        else:
            self.raw = np.empty(nbytes, np.uint8)
        # Lent arrays look at the bytes through this ctypes object, not as NumPy views of
        # ``raw``: NumPy then makes every view of a lent array point at that array itself (it
        # collapses chains of views only through arrays), so it dies exactly when its last view does.
        self.window = (ctypes.c_uint8 * nbytes).from_buffer(self.raw)
        self.pinned, self.event, self.taken = pinned, None, True


class _Lease(weakref.ref):
    """The weak reference to a lent array; its callback gives ``buffer`` back."""

    __slots__ = ("key", "buffer", "generation")


class HostPool:
    """Host buffers by ``(nbytes, pinned)``; ``allocations`` counts the buffers ever made."""

    def __init__(self):
        self.allocations = 0
        self._idle = {}  # (nbytes, pinned) -> [_Buffer], the last one given back on top
        self._lent = {}  # id(lent array) -> its _Lease
        self._generation = 0  # bumped by empty(): older leases free their buffer when they die
        self._callback = self._give_back  # one bound method, not a new one per lease

    def take(self, like, pinned=False):
        """An uninitialised host array of ``like``'s shape and dtype, in a pooled buffer."""
        nbytes = like.nbytes
        idle = self._idle.get((nbytes, pinned))
        if idle:
            buffer = idle.pop()  # the last given back: the likeliest to be still in cache
            memory.release(buffer.raw)
            if buffer.event is not None:
                buffer.event.synchronize()  # a copy on another stream may still use it
                buffer.event = None
        else:
            buffer = _Buffer(nbytes, pinned)
            self.allocations += 1
        buffer.taken = True
        array = np.ndarray(like.shape, like.dtype, buffer=buffer.window)
        lease = _Lease(array, self._callback)
        lease.key, lease.buffer, lease.generation = id(array), buffer, self._generation
        self._lent[lease.key] = lease
        return array

    def record(self, array, event):
        """An asynchronous copy (a CUDA event) uses ``array``: its buffer waits for it before reuse."""
        self._lent[id(array)].buffer.event = event

    def _give_back(self, lease):
        del self._lent[lease.key]
        if lease.generation != self._generation:
            return  # emptied meanwhile: the buffer is freed with the lease
        buffer = lease.buffer
        memory.register(buffer.raw, "workspace", "host", label="host pool")
        self._idle.setdefault((buffer.raw.nbytes, buffer.pinned), []).append(buffer)

    def new_step(self):
        """Free the idle buffers that nobody took since the last call (shapes no longer used)."""
        for key, buffers in list(self._idle.items()):
            for buffer in [b for b in buffers if not b.taken]:
                buffers.remove(buffer)
                memory.release(buffer.raw)
            for buffer in buffers:
                buffer.taken = False
            if not buffers:
                del self._idle[key]

    def empty(self):
        """Free every idle buffer now; buffers lent now are freed when their leases die."""
        for buffers in self._idle.values():
            for buffer in buffers:
                memory.release(buffer.raw)
        self._idle.clear()
        self._generation += 1

    @property
    def idle_bytes(self):
        return sum(b.raw.nbytes for buffers in self._idle.values() for b in buffers)

    @property
    def lent_bytes(self):
        return sum(lease.buffer.raw.nbytes for lease in self._lent.values())


HOST_POOL = HostPool()


def empty_host_pool():
    """Give back the host memory that activation offload keeps for reuse (like
    ``torch.cuda.empty_cache()`` for its cache); the next step allocates it again."""
    HOST_POOL.empty()
