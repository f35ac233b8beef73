"""Offload: keep training state off the device and bring it back when it is needed.

Four kinds, one file each behind this module (the seams of DESIGN.md):

* **Activations** — :class:`save_on_host` and :class:`save_on_disk`, ``saved_tensors_hooks``
  used like PyTorch's ``torch.autograd.graph.save_on_cpu``: every tensor saved for backward
  inside the block is copied out at pack time and brought back at unpack time, with a
  background prefetch (here; the stores are in :mod:`.offload_store`).
* **Weights** — :func:`~.offload_stream.stream_layers`: parameters live on the host or on disk
  and visit the device one layer at a time, in forward and again in backward (ZeRO-Infinity,
  FlexGen).
* **Optimizer state** — :func:`~.offload_optim.offload_optimizer`: the state lives on the host
  or on disk and the update runs there (ZeRO-Offload).
* **Bandwidths** — :func:`~.offload_store.measure_bandwidths`: what one byte costs to move on
  this machine, so a schedule's time can be predicted and checked.

Memory, activations: the device keeps no saved activation between forward and backward
(``sum(nbytes)`` of them moves to the host or disk); during backward it holds the one being used
plus ``prefetch`` arrays brought back ahead of time. Parameters saved by an op (a Linear's
weight) stay where they are: they are resident anyway, and copying them would move bytes for
nothing. Time: each saved byte crosses twice (out in forward, back in backward); prefetch hides
the way back behind the backward compute when a second core or a DMA engine is free.

On NumPy the "device" is the ledger's budgeted place and the host is the same RAM:
:class:`save_on_host` there is honest accounting plus a real copy, *not* a physical saving.
Disk offload is real on every machine (the OS page cache may serve the reads from RAM; the
measured bandwidths say which). On CuPy the host copies go to pinned memory on a copy stream.

Pitfalls:
* :class:`save_on_disk` removes its files when the ``with`` block exits, so run ``backward()``
  inside the block; unpacking later raises :class:`OffloadError` saying so.
  :class:`save_on_host` has no such limit (its copies live as long as the graph).
* Prefetch guesses the order from the pack order; a branchy graph only lowers the hit rate
  (``stats()["prefetch_hits"]``), never the correctness.
"""
from ..autograd import Tensor, saved_tensors_hooks
from .. import memory
from .offload_optim import OffloadedOptimizer, offload_optimizer
from .offload_store import DiskStore, HostStore, OffloadError, Prefetcher
from .offload_bandwidth import measure_bandwidths, predicted_seconds
from .offload_stream import StreamedLayers, stream_layers

__all__ = ["save_on_host", "save_on_disk", "stream_layers", "StreamedLayers", "offload_optimizer",
           "OffloadedOptimizer", "OffloadError", "measure_bandwidths", "predicted_seconds"]


class _SaveOffloaded(saved_tensors_hooks):
    """Pack: store a copy, keep a handle. Unpack: bring it back (prefetched when possible)."""

    def __init__(self, prefetch):
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0 (0 turns it off), got {prefetch}")
        self.prefetch = prefetch
        self.store = self.prefetcher = None
        super().__init__(self._pack, self._unpack)

    def __enter__(self):
        self.store = self._new_store()
        self.prefetcher = Prefetcher(self.store, self.prefetch)
        return super().__enter__()

    def __exit__(self, *exc):
        super().__exit__(*exc)
        self.prefetcher.close()
        self.store.close()
        return False

    def _pack(self, t):
        located = memory.locate(t.data)
        if located is not None and located[0] == "parameter":
            return t
        return self.prefetcher.track(self.store.put(t.data))

    def _unpack(self, packed):
        if isinstance(packed, Tensor):
            return packed
        return self.prefetcher.get(packed)

    def stats(self):
        """Bytes moved each way, prefetch hits and misses, seconds spent waiting for loads."""
        return {"bytes_out": self.store.moved_out, "bytes_in": self.store.moved_in,
                "prefetch_hits": self.prefetcher.hits, "prefetch_misses": self.prefetcher.misses,
                "wait_s": self.prefetcher.wait_s, "place": self.store.place}


class save_on_host(_SaveOffloaded):
    """``with save_on_host(): loss = model(x)`` — saved tensors wait in host memory.

    ``pin_memory`` (CuPy): copy into page-locked memory on a separate stream, so copies run
    asynchronously; ``prefetch``: how many saved tensors to bring back ahead of use (0: none).
    Backward may run inside or after the block, as with ``save_on_cpu``.
    """

    def __init__(self, pin_memory=True, prefetch=1):
        self.pin_memory = pin_memory
        super().__init__(prefetch)

    def _new_store(self):
        # The host copies outlive the block; after it, loads are synchronous (no thread).
        return HostStore("activation", "workspace", self.pin_memory)


class save_on_disk(_SaveOffloaded):
    """``with save_on_disk(): loss = model(x); loss.backward()`` — saved tensors wait in files.

    ``directory``: where the private temporary folder goes (default: the system temporary
    directory); ``prefetch``: how many saved tensors a background thread reads ahead (0: none).
    The folder and every file in it are removed when the block exits, normally or by an
    exception (Ctrl-C included).
    """

    def __init__(self, directory=None, prefetch=1):
        self.directory = directory
        super().__init__(prefetch)

    def _new_store(self):
        return DiskStore(self.directory, "activation", "workspace", "device")

    @property
    def path(self):
        """The temporary folder of the block in progress (``None`` outside one)."""
        return None if self.store is None else self.store.directory
