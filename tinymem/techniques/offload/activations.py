"""Activation offload: ``save_on_host`` and ``save_on_disk``, saved-tensor hooks that copy every
tensor saved for backward out of the device at pack time and bring it back at unpack time, with
a background prefetch (the stores are in ``store.py``, the prefetch thread in ``prefetch.py``).
They are used like PyTorch's ``torch.autograd.graph.save_on_cpu``.

Memory: the device keeps no saved activation between forward and backward:
``sum(nbytes)`` of them moves to the host or disk, each array once even when two ops save it
(a ReLU's output is also the next Linear's input). During backward the device holds the arrays
of the node running plus ``prefetch`` brought back ahead of time, and in forward (disk) up to
``prefetch`` arrays waiting for their write. Parameters saved by an op (a Linear's weight) stay
where they are: they are resident anyway, and copying them would move bytes for nothing.
Time: each saved byte crosses twice (out in forward, back in backward; once on NumPy, see
below); prefetch hides the way
back behind the backward compute, and on disk the same background thread writes behind
forward, when a second core or a DMA engine is free. ``stats()`` measures what was hidden.

On NumPy the "device" is the ledger's budgeted place and the host is the same RAM:
:class:`save_on_host` there is honest accounting plus one real copy, *not* a physical saving;
backward reads that copy where it is (nothing comes back to the device, as with PyTorch's
``save_on_cpu`` on a CPU tensor). Host copies go into buffers of a pool (``pool.py``) reused
from step to step: no allocation per tensor, and ``empty_host_pool()`` frees what it keeps.
Disk offload is real on every machine (the OS page cache may serve the reads from RAM; the
measured bandwidths say which). On CuPy the host copies go to pinned memory on a copy stream.

Lifetimes: each offloaded copy lives as long as the graph needs it. A file is removed when
its saved tensor is unpacked for the last time or its graph is freed, and the folder with its
last file, so ``backward()`` may run inside the block or after it (PyTorch's ``save_on_cpu``
idiom). The prefetch thread stops at the end of the block; a backward after it loads
synchronously. A block that exits by an exception (Ctrl-C included) removes its files at once,
and interpreter exit removes whatever a live graph still held.

Pitfalls:
* Files outlive the block while their graph does: a ``loss`` kept without ``backward()`` keeps
  its files on disk until it is dropped.
* Prefetch guesses the order from the pack order; a branchy graph only lowers the hit rate
  (``stats()["prefetch_hits"]``), never the correctness.
"""
import weakref
from collections import OrderedDict

from ... import memory
from ...autograd import Tensor, saved_tensors_hooks
from .pool import HOST_POOL
from .prefetch import Prefetcher
from .store import DiskStore, HostStore


class _SaveOffloaded(saved_tensors_hooks):
    """Pack: store a copy, keep a handle. Unpack: bring it back (prefetched when possible)."""

    def __init__(self, prefetch):
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0 (0 turns it off), got {prefetch}")
        self.prefetch = prefetch
        self.store = self.prefetcher = None
        self._recent = OrderedDict()  # id(array) -> (weakref to it, weakref to its handle)
        super().__init__(self._pack, None)  # the unpack hook is made per block, in __enter__

    def __enter__(self):
        store = self._new_store()
        prefetcher = Prefetcher(store, self.prefetch)
        self.store, self.prefetcher = store, prefetcher
        # The graph of this block unpacks through this block's prefetcher, even when the object
        # is entered again before that backward runs (a handle's index means nothing elsewhere).
        self.unpack_hook = lambda packed: packed if isinstance(packed, Tensor) else prefetcher.get(packed)
        return super().__enter__()

    def __exit__(self, kind, value, tb):
        super().__exit__(kind, value, tb)
        self._recent.clear()
        if kind is None:
            try:
                self.store.detach()  # writes in flight finish: a backward after the block reads them
            except BaseException:
                self.prefetcher.close()
                self.store.close()
                raise
            self.prefetcher.close()  # later loads are synchronous; no thread outlives the block
            return False
        self.prefetcher.close()  # an exception: no backward will run, remove everything now
        self.store.close()
        return False

    def _pack(self, t):
        located = memory.locate(t.data)
        if (located is not None and located[0] == "parameter") or getattr(t.data, "ndim", 0) == 0:
            return t  # resident anyway, or a scalar (a loss weight): a few bytes, nothing to move
        seen = self._recent.get(id(t.data))
        if seen is not None and seen[0]() is t.data and seen[1]() is not None:
            return self.prefetcher.share(seen[1]())  # the same array, saved by a second op
        handle = self.prefetcher.track(self.store.put(t.data, self.prefetcher.worker, self.prefetch))
        self._recent[id(t.data)] = (weakref.ref(t.data), weakref.ref(handle))
        if len(self._recent) > 16:  # sharing happens between neighbouring ops
            self._recent.popitem(last=False)
        return handle

    def stats(self):
        """Bytes moved each way, prefetch hits and misses, and the seconds the main thread was
        blocked waiting for loads (``wait_s``) and for writes (``write_wait_s``). ``bytes_in``
        is 0 for :class:`save_on_host` on NumPy: backward reads the host copies in place."""
        return {"bytes_out": self.store.moved_out, "bytes_in": self.store.moved_in,
                "prefetch_hits": self.prefetcher.hits, "prefetch_misses": self.prefetcher.misses,
                "wait_s": self.prefetcher.wait_s, "write_wait_s": getattr(self.store, "write_wait_s", 0.0),
                "place": self.store.place}


class save_on_host(_SaveOffloaded):
    """``with save_on_host(): loss = model(x)`` — saved tensors wait in host memory.

    ``pin_memory`` (CuPy): copy into page-locked memory on a separate stream, so copies run
    asynchronously; ``prefetch``: how many saved tensors to bring back ahead of use (0: none).
    Backward may run inside or after the block, as with ``save_on_cpu``.

    Memory at place ``host``: the saved bytes, in ``activation``, until backward has used them;
    then their buffers wait in the pool for the next step, in ``workspace`` (label ``"host
    pool"``). An exception leaving the block empties the pool: the failed step's buffers are
    freed with its graph, not kept.
    """

    def __init__(self, pin_memory=True, prefetch=1):
        self.pin_memory = pin_memory
        super().__init__(prefetch)

    def __exit__(self, kind, value, tb):
        if kind is not None:
            HOST_POOL.empty()
        return super().__exit__(kind, value, tb)

    def _new_store(self):
        # The host copies outlive the block; after it, loads are synchronous (no thread).
        HOST_POOL.new_step()
        return HostStore("activation", "workspace", self.pin_memory, pool=HOST_POOL, copy_back=False)


class save_on_disk(_SaveOffloaded):
    """``with save_on_disk(): loss = model(x)`` then ``loss.backward()`` (inside the block or
    after it) — saved tensors wait in files.

    ``directory``: where the private temporary folder goes (default: the system temporary
    directory); ``prefetch``: the depth of the background I/O, which writes files behind
    forward and reads them ahead of backward, ``prefetch`` of each in flight (0: synchronous);
    ``page_cache=False``: flush each file and evict it from the OS page cache, so backward reads
    the disk itself (slower, and what offloading to a real disk costs once RAM is short).
    Each file is removed once backward has used it (or its graph is freed) and the folder with
    the last one; an exception (Ctrl-C included) removes them all when it leaves the block.
    """

    def __init__(self, directory=None, prefetch=1, page_cache=True):
        self.directory, self.page_cache = directory, page_cache
        super().__init__(prefetch)

    def _new_store(self):
        return DiskStore(self.directory, "activation", "workspace", "device", page_cache=self.page_cache)

    @property
    def path(self):
        """The temporary folder of the block in progress (``None`` outside one)."""
        return None if self.store is None else self.store.directory


def saved_schedule(forward):
    """Run ``forward()`` and return the bytes of each array it saves for backward, in order,
    once per array and parameters left out: exactly what :class:`save_on_disk` would write."""
    sizes, seen = [], set()

    def pack(t):
        located = memory.locate(t.data)
        if (located is None or located[0] != "parameter") and id(t.data) not in seen:
            seen.add(id(t.data))
            sizes.append(t.data.nbytes)
        return t  # keeps every saved array alive, so no id is reused
    with saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sizes
