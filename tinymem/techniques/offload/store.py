"""Where offloaded arrays live (host copies, files on disk) and how they come back.

Two stores, shared by every kind of offload in :mod:`tinymem.techniques.offload`, and the
prefetcher of :mod:`.offload_prefetch` that drives them:

* :class:`HostStore` keeps a copy of each array in host memory. Memory: ``nbytes`` per array at
  place ``host``, none on the device. On CuPy the copy goes into *pinned* (page-locked) host
  memory on a separate CUDA stream, so it runs beside the compute kernels; on NumPy the device
  and the host are the same RAM and the copy is honest accounting plus a real ``memcpy``, not a
  physical saving. With a ``pool`` (:mod:`.pool`) the copies go into buffers reused from step to
  step; with ``copy_back=False`` a load on NumPy hands back the host copy itself (the same RAM:
  a second copy would only cost time), so each array is copied once in all.
* :class:`DiskStore` writes each array to its own file in a private temporary directory.
  Memory: ``nbytes`` per array at place ``disk``. With ``page_cache=False`` each file is flushed
  (``fsync``) and evicted from the OS page cache, so it is read back from the disk itself, as
  an offload to NVMe would be; otherwise the OS may keep the bytes in RAM and serve reads from
  there. A file disappears as soon as its handle dies (the saved tensor was unpacked for the
  last time, or its graph was freed); after :meth:`detach` the directory goes with the last
  file; :meth:`close` removes everything at once; interpreter exit removes whatever is left.
* :class:`~.offload_prefetch.Prefetcher` brings arrays back ahead of use, on a background
  :class:`~.offload_prefetch.Worker`; the same worker writes files *behind* forward
  (``DiskStore.put(array, worker, behind)``), at most ``behind`` writes in flight, each keeping
  its array on the device until written.

Contract: a store's ``put(array, worker=None)`` returns a handle; ``begin_load(handle, worker)``
allocates the destination *in the calling thread* (so an array is counted, and freed, at a
moment the caller chose, not the worker) and starts the copy, on ``worker`` when given;
``finish_load(pending)`` waits and returns the array. Every byte moved is counted in ``moved_out`` / ``moved_in``.

Pitfalls: pinned memory is finite (the OS cannot page it out; pinning many GiB slows the whole
machine); a disk write that fails (disk full) raises :class:`OffloadError` naming the file.
"""
import os
import shutil
import tempfile
import time
import weakref
from collections import deque

import numpy as np

from ... import backend, memory
from .copies import CopyStream, InFlight, pinned_empty


class OffloadError(RuntimeError):
    """An offloaded array cannot be brought back (missing, truncated or unreadable file)."""


class _Pending:
    """A transfer that has begun: the destination, the job or event to wait for."""

    __slots__ = ("array", "shape", "dtype", "job", "event", "staging")

    def __init__(self, array, handle, job=None, event=None, staging=None):
        # Not the handle itself: a prefetch must not keep a dead saved tensor (and its file) alive.
        self.array, self.shape, self.dtype, self.job = array, handle.shape, handle.dtype, job
        self.event, self.staging = event, staging


def _contiguous(array):
    """``array`` in C order, same shape (``ascontiguousarray`` would turn 0-d into 1-d)."""
    return array if array.flags.c_contiguous else array.copy(order="C")


def _bytes_view(array):
    """A flat uint8 view of a C-contiguous array, for readinto/write without a copy."""
    return memoryview(array.reshape(-1).view(np.uint8))


class HostStore:
    """Copies in host memory (pinned on CuPy). ``bucket``: how the host copy is counted;
    ``load_bucket``: how the array brought back to the device is counted."""

    place = "host"

    def __init__(self, bucket="activation", load_bucket="workspace", pin_memory=True, pool=None,
                 copy_back=True):
        self.bucket, self.load_bucket, self.pin_memory = bucket, load_bucket, pin_memory
        self.pool, self.copy_back = pool, copy_back
        self.moved_out = self.moved_in = 0
        self._copy = None
        self._inflight = InFlight()  # device sources of copies to the host

    def _stream(self):
        if self._copy is None:
            self._copy = CopyStream()
        return self._copy

    def put(self, array, worker=None, behind=1):
        """Copy ``array`` to the host (a memcpy; on CuPy an asynchronous copy: no worker needed)."""
        device = backend.device_of(array)
        if device == "cpu":
            host = self._host_empty(array, pinned=False)
            np.copyto(host, array)
            event = None
        else:
            host, event = self._to_pinned(array)
        memory.register(host, self.bucket, "host")
        self.moved_out += host.nbytes
        return _HostCopy(host, event, device)

    def _host_empty(self, like, pinned):
        if self.pool is not None:
            return self.pool.take(like, pinned)
        return pinned_empty(like.shape, like.dtype) if pinned else np.empty(like.shape, like.dtype)

    def _to_pinned(self, array):
        source = _contiguous(array)
        host = self._host_empty(source, pinned=self.pin_memory)
        if not self.pin_memory:
            source.get(out=host)
            return host, None
        copy = self._stream()
        copy.after_compute()
        source.get(stream=copy.stream, out=host, blocking=False)
        event = copy.record()
        if self.pool is not None:
            self.pool.record(host, event)
        self._inflight.add(event, source)
        return host, event

    def begin_load(self, handle, worker=None):
        host = handle.host
        if handle.device == "cpu" and not self.copy_back:
            return _Pending(host, handle)  # read where it is: no byte moves
        if handle.device == "cpu":
            dest = memory.register(np.empty(host.shape, host.dtype), self.load_bucket, "device")
            self.moved_in += dest.nbytes
            if worker is None:
                np.copyto(dest, host)
                return _Pending(dest, handle)
            return _Pending(dest, handle, job=worker.submit(np.copyto, dest, host))
        return self._load_cuda(handle, host)

    def _load_cuda(self, handle, host):
        cupy = backend.get_cupy()
        copy = self._stream()
        dest = memory.register(cupy.empty(host.shape, host.dtype), self.load_bucket, "device")
        copy.after_compute()
        if getattr(handle, "event", None) is not None:
            copy.stream.wait_event(handle.event)
        dest.set(host, stream=copy.stream)
        self.moved_in += dest.nbytes
        event = copy.record()
        if self.pool is not None:
            self.pool.record(host, event)
        return _Pending(dest, handle, event=event)

    def finish_load(self, pending):
        if pending.job is not None:
            pending.job.wait()
        if pending.event is not None:
            self._copy.hand_over(pending.event)
        return pending.array

    def close(self):
        self._inflight.wait()

    def detach(self):
        """End of the offload block: the copies live on with their handles (nothing to remove)."""
        self.close()


class _HostCopy:
    __slots__ = ("host", "event", "device", "index", "__weakref__")

    def __init__(self, host, event, device):
        self.host, self.event, self.device, self.index = host, event, device, -1

    @property
    def shape(self):
        return self.host.shape

    @property
    def dtype(self):
        return self.host.dtype


class _File:
    """A handle on one offloaded array's file; the file is deleted when the handle dies."""

    __slots__ = ("path", "shape", "dtype", "nbytes", "device", "index", "writing", "__weakref__")

    def __init__(self, path, shape, dtype, device):
        self.path, self.shape, self.dtype, self.device = path, shape, np.dtype(dtype), device
        self.nbytes = int(np.prod(shape, dtype=np.int64)) * self.dtype.itemsize
        self.index, self.writing = -1, None


def _unlink(path):
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class DiskStore:
    """One file per array in ``tempfile.mkdtemp(dir=directory)``; removed by :meth:`close`.

    ``load_place`` is where :meth:`begin_load` puts the array read back: ``"device"`` (saved
    activations, on CuPy through a host staging buffer) or ``"host"`` (optimizer state).
    """

    place = "disk"

    def __init__(self, directory=None, bucket="activation", load_bucket="workspace",
                 load_place="device", prefix="tinymem-offload-", page_cache=True):
        if directory is not None and not os.path.exists(directory):
            raise OffloadError(f"offload directory {directory!r} does not exist; create it or "
                               f"pass directory=None for the system temporary directory")
        if directory is not None and not os.path.isdir(directory):
            raise OffloadError(f"offload directory {directory!r} is a file, not a directory; pass "
                               f"a folder, or directory=None for the system temporary directory")
        try:
            self.directory = tempfile.mkdtemp(prefix=prefix, dir=directory)
        except OSError as exc:
            raise OffloadError(f"cannot create the offload folder in {directory or tempfile.gettempdir()!r} "
                               f"({exc.strerror or exc}): choose a writable directory= with free "
                               f"space") from exc
        self.bucket, self.load_bucket, self.load_place = bucket, load_bucket, load_place
        self.page_cache = page_cache
        self.moved_out = self.moved_in = 0
        self.closed = self.detached = False
        self._count = self._files = 0
        self._live = weakref.WeakSet()
        self._behind = deque()  # handles whose file is still being written by a worker
        self._staged = InFlight()  # pinned staging buffers of copies to the device
        self.write_wait_s = 0.0  # time the caller was blocked writing (or waiting for writes)
        # Runs at close() or, if nobody closes the store, when it is collected or Python exits.
        self._remove = weakref.finalize(self, shutil.rmtree, self.directory, True)

    def put(self, array, worker=None, behind=1):
        """Write ``array`` to a new file; with a ``worker``, in the background, keeping at most
        ``behind`` writes (and their arrays) in flight."""
        if self.closed or self.detached:
            raise OffloadError(f"offload store {self.directory} is closed; open a new one")
        host = _contiguous(backend.to_numpy(array))
        path = os.path.join(self.directory, f"{self._count:06d}.bin")
        self._count += 1
        handle = _File(path, host.shape, host.dtype, backend.device_of(array))
        if worker is None:
            start = time.perf_counter()
            write_file(path, host, self.page_cache)
            self.write_wait_s += time.perf_counter() - start
        else:
            handle.writing = worker.submit(write_file, path, host, self.page_cache)
            self._behind.append(handle)
            self._reap(behind)
        self._files += 1
        weakref.finalize(handle, self._file_gone, path)  # keeps the store alive as long as a file
        memory.register_bytes(handle, handle.nbytes, self.bucket, "disk", label=os.path.basename(path))
        self._live.add(handle)
        self.moved_out += handle.nbytes
        return handle

    def begin_load(self, handle, worker=None):
        if self.load_place == "device" and handle.device == "cuda":
            staging = pinned_empty(handle.shape, handle.dtype)
            dest = None
        else:
            staging = dest = memory.register(np.empty(handle.shape, handle.dtype), self.load_bucket,
                                             self.load_place)
        self.moved_in += handle.nbytes
        if worker is None:
            self.read_into(handle, staging)
            return _Pending(dest, handle, staging=staging)
        return _Pending(dest, handle, job=worker.submit(self.read_into, handle, staging), staging=staging)

    def _reap(self, behind):
        """Forget finished writes (their arrays die here, in the main thread); wait while more
        than ``behind`` are in flight."""
        start = time.perf_counter()
        while self._behind and (len(self._behind) > behind or self._behind[0].writing.done.is_set()):
            handle = self._behind.popleft()
            handle.writing.wait()
            handle.writing = None
        self.write_wait_s += time.perf_counter() - start

    def finish_load(self, pending):
        if pending.job is not None:
            pending.job.wait()
        if pending.array is not None:
            return pending.array
        cupy = backend.get_cupy()
        dest = memory.register(cupy.empty(pending.shape, pending.dtype), self.load_bucket, "device")
        # An asynchronous copy on the compute stream (CuPy's ``set`` from pinned memory): the
        # staging buffer is kept until it is done. Freed at once, the next prefetch was given the
        # same pinned block and read its file into it first: gradients differed on a GPU.
        dest.set(pending.staging)
        self._staged.add(cupy.cuda.get_current_stream().record(), pending.staging)
        return dest

    def read_into(self, handle, out):
        """Fill ``out`` from ``handle``'s file, or raise :class:`OffloadError` naming the file."""
        if handle.writing is not None:
            handle.writing.wait()  # a read never overtakes the write of its file
        if self.closed and not os.path.exists(handle.path):
            raise OffloadError(
                f"offload file {handle.path} is gone: the offload block that wrote it exited by an "
                f"exception and removed its files; run the forward again")
        read_file(handle.path, out)

    def live_files(self):
        return len(self._live)

    def _file_gone(self, path):
        """A handle died (its saved tensor was used for the last time, or its graph was freed)."""
        _unlink(path)
        self._files -= 1
        if self.detached and self._files == 0:
            self._remove()

    def detach(self):
        """Take no new file; finish the writes in flight, and remove the directory with its last
        file (now, if none is left). Files stay readable as long as their handles live."""
        self._reap(0)
        self._staged.wait()
        self.detached = True
        if self._files == 0:
            self._remove()

    def close(self):
        """Forget every file and remove the directory now (safe to call twice)."""
        self.closed = self.detached = True
        self._behind.clear()
        self._staged.wait()
        for handle in list(self._live):
            memory.release(handle)
        self._remove()


def write_file(path, host, page_cache=True):
    """Write the bytes of a C-contiguous NumPy array to ``path`` (unbuffered, no extra copy).

    ``page_cache=False``: flush to the disk and drop the file from the page cache, so that
    reading it back costs a real disk read.
    """
    try:
        with open(path, "wb", buffering=0) as f:
            view = _bytes_view(host)
            written = 0
            while written < len(view):
                written += f.write(view[written:])
            if not page_cache:
                os.fsync(f.fileno())
                if hasattr(os, "posix_fadvise"):
                    os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    except OSError as exc:
        _unlink(path)
        raise OffloadError(f"writing offload file {path} failed ({exc.strerror or exc}); free space "
                           f"there or choose another directory=") from exc


def read_file(path, out):
    """Read ``path`` into the C-contiguous array ``out``; the size must match exactly."""
    try:
        f = open(path, "rb", buffering=0)
    except FileNotFoundError:
        raise OffloadError(f"offload file {path} is missing: it was deleted while its array was "
                           f"still needed (another process cleaning the temporary directory?)") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        expected = out.nbytes
        if size != expected:
            raise OffloadError(f"offload file {path} is truncated or corrupted: {size} bytes on disk, "
                               f"expected {expected} for an array of shape {out.shape} {out.dtype}")
        view = _bytes_view(out)
        got = 0
        while got < expected:
            n = f.readinto(view[got:])
            if not n:
                raise OffloadError(f"offload file {path} ended after {got} of {expected} bytes")
            got += n
