"""Where a replay buffer's frames live: the four storage schemes behind ``ReplayBuffer``.

Each scheme stores, per slot of the ring, what it needs to rebuild the transition ending there,
and returns float32 (obs, next_obs) stacks for a batch. F = elements of one frame, k = stack:

- :class:`Float32Storage` (the naive scheme): obs and next_obs stacks per slot, float32.
  2·k·F·4 bytes per slot; every frame is kept 2·k times, 4 bytes each.
- :class:`Uint8Storage`: the same stacks as uint8 (pixels are 0..255 anyway). 2·k·F bytes.
- :class:`DedupStorage`: each frame once; stacks are rebuilt at sampling time from the index
  (``replay.stack_slots``). F bytes per slot: 2·k·4 = 32x less than naive at k = 4.
- :class:`DiskStorage`: the deduplicated frame array in a memory-mapped file. F bytes of disk
  per slot, nothing in RAM but the index (the OS page cache may hold recently used pages: it is
  not the process's memory and the OS evicts it under pressure). The file is created unnamed
  (``tempfile.TemporaryFile``: on Linux it has no directory entry), so it disappears when
  closed, when the buffer is garbage-collected, or if the process dies.

All four return identical float32 values: uint8 codes are exact float32 numbers.
"""
import mmap
import os
import tempfile
import weakref

import numpy as np

from .. import memory


class Float32Storage:
    """obs and next_obs stacks per slot in float32: 2·k·F·4 bytes per slot (host)."""

    name, dtype = "float32", np.float32

    @classmethod
    def bytes_per_slot(cls, frame_shape, frame_stack, frame_dtype):
        return 2 * frame_stack * int(np.prod(frame_shape)) * np.dtype(cls.dtype).itemsize

    def __init__(self, capacity, frame_shape, frame_stack, frame_dtype, directory=None):
        shape = (capacity, frame_stack) + tuple(frame_shape)
        label = f"replay {self.name} stacks"
        self.obs = memory.register(np.zeros(shape, self.dtype), "workspace", "host", label=label)
        self.next_obs = memory.register(np.zeros(shape, self.dtype), "workspace", "host", label=label)

    def write(self, slot, window, start):
        """Store the transition ending at ``slot``; ``window`` holds the last k+1 frames."""
        if not start:  # a reset slot ends no transition: nothing to keep
            self.obs[slot] = window[:-1]
            self.next_obs[slot] = window[1:]

    def read(self, slots, obs_pos, next_pos, out=None):
        obs, nxt = out if out is not None else (None, None)
        return _as_float(self.obs[slots], obs), _as_float(self.next_obs[slots], nxt)

    @property
    def host_bytes(self):
        return self.obs.nbytes + self.next_obs.nbytes

    disk_bytes = 0

    def close(self):
        self.obs = self.next_obs = None


class Uint8Storage(Float32Storage):
    """The same stacks in uint8: 2·k·F bytes per slot (host), 4x less than float32."""

    name, dtype = "uint8", np.uint8


class DedupStorage:
    """Each frame once, F bytes per slot (host); stacks gathered by slot at sampling time."""

    name, place = "dedup", "host"

    @classmethod
    def bytes_per_slot(cls, frame_shape, frame_stack, frame_dtype):
        return int(np.prod(frame_shape)) * np.dtype(frame_dtype).itemsize

    def __init__(self, capacity, frame_shape, frame_stack, frame_dtype, directory=None):
        self.frames = memory.register(np.zeros((capacity,) + tuple(frame_shape), frame_dtype),
                                      "workspace", "host", label="replay frames")

    def write(self, slot, window, start):
        self.frames[slot] = window[-1]

    def read(self, slots, obs_pos, next_pos, out=None):
        obs, nxt = out if out is not None else (None, None)
        return _as_float(self.frames[obs_pos], obs), _as_float(self.frames[next_pos], nxt)

    @property
    def host_bytes(self):
        return self.frames.nbytes

    disk_bytes = 0

    def close(self):
        self.frames = None


class DiskStorage(DedupStorage):
    """The deduplicated frames in an unnamed memory-mapped file: F bytes per slot on disk."""

    name, place = "disk", "disk"

    def __init__(self, capacity, frame_shape, frame_stack, frame_dtype, directory=None):
        nbytes = capacity * self.bytes_per_slot(frame_shape, frame_stack, frame_dtype)
        try:
            self.file = tempfile.TemporaryFile(prefix="tinymem-replay-", dir=directory)
        except OSError as err:
            raise ValueError(f"storage 'disk' cannot create its file in {directory!r} ({err.strerror}); pass "
                             "an existing writable directory, or directory=None for the system temporary one") from err
        try:
            self.file.truncate(nbytes)
            self.map = mmap.mmap(self.file.fileno(), nbytes)
        except BaseException:
            self.file.close()
            raise
        self.frames = np.frombuffer(self.map, frame_dtype).reshape((capacity,) + tuple(frame_shape))
        memory.register_bytes(self.frames, nbytes, "workspace", "disk", label="replay frames file")
        # Close the mapping and the file when the buffer is dropped without close().
        self._finalizer = weakref.finalize(self, _close_file, self.map, self.file)

    def evict(self):
        """Write dirty pages and drop this file from the page cache, so the next reads come from
        the disk itself (a cold read) rather than from RAM the OS kept. Returns False where the
        OS offers no way to do so (``posix_fadvise`` is Linux and BSD only)."""
        self.map.flush()
        os.fsync(self.file.fileno())
        if not (hasattr(os, "posix_fadvise") and hasattr(mmap, "MADV_DONTNEED")):
            return False
        self.map.madvise(mmap.MADV_DONTNEED)  # unmap our pages first: mapped pages stay cached
        os.posix_fadvise(self.file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        return True

    @property
    def host_bytes(self):
        return 0

    @property
    def disk_bytes(self):
        return self.frames.nbytes if self.frames is not None else 0

    def close(self):
        if self.frames is not None:
            memory.release(self.frames)
            self.frames = None
            self._finalizer()


def _close_file(mapping, file):
    try:
        mapping.close()
    except BufferError:  # a view of the mapping is still alive: the OS unmaps it at exit
        pass
    file.close()


def _as_float(frames, out=None):
    if out is None:
        return frames.astype(np.float32, copy=False)  # fancy indexing already made a copy
    out[...] = frames
    return out


SCHEMES = {cls.name: cls for cls in (Float32Storage, Uint8Storage, DedupStorage, DiskStorage)}


def make_storage(name, capacity, frame_shape, frame_stack, frame_dtype, directory=None):
    """The storage scheme ``name`` for ``capacity`` slots, with a clear error on misuse."""
    if name not in SCHEMES:
        raise ValueError(f"unknown storage {name!r}; choose one of {', '.join(SCHEMES)}")
    if name != "float32" and np.dtype(frame_dtype) != np.uint8:
        raise TypeError(f"storage {name!r} keeps uint8 frames, but frame_dtype is {np.dtype(frame_dtype)}: "
                        f"quantize the observations (rl.envs.QuantizeObservation) or use storage='float32'")
    return SCHEMES[name](capacity, frame_shape, frame_stack, frame_dtype, directory)
