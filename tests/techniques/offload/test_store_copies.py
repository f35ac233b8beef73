"""Disk offload on a GPU: a file comes back through a pinned staging buffer and an asynchronous
copy (CuPy's ``set`` on the compute stream), so the buffer must outlive the copy. Freed at once,
CuPy's pinned pool gave it to the next prefetch, whose read overwrote it before the GPU copied
it: on the H200 disk offload with prefetch was not bit-identical. CI has no asynchronous copies,
so a fake CuPy here copies only when the stream gets to it."""
import types
import weakref

import numpy as np
import pytest

from tinymem import backend
from tinymem.techniques.offload import store as store_module
from tinymem.techniques.offload.store import DiskStore, _File, write_file


class _Stream:
    """The compute stream: ``set`` queues copies, ``run()`` does them, events mark the queue."""

    def __init__(self):
        self.pending, self.queued, self.ran = [], 0, 0

    def copy(self, dest, source):
        # Read when the stream runs, not now; as on a GPU, the copy does not keep its source.
        self.pending.append((dest, weakref.ref(source)))
        self.queued += 1

    def record(self):
        stream, mark = self, self.queued

        class Event:
            @property
            def done(self):
                return stream.ran >= mark

            def synchronize(self):
                stream.run()
        return Event()

    def run(self):
        for dest, source in self.pending:
            # A source freed before its copy ran: the pinned pool may have given its memory to
            # another buffer since; NaN stands for whatever was written there.
            dest[...] = np.nan if source() is None else source()
        self.pending.clear()
        self.ran = self.queued


@pytest.fixture
def gpu(monkeypatch):
    stream = _Stream()

    class DeviceArray(np.ndarray):
        def set(self, host):
            stream.copy(self, host)

    fake = types.SimpleNamespace(empty=lambda shape, dtype: np.empty(shape, dtype).view(DeviceArray),
                                 cuda=types.SimpleNamespace(get_current_stream=lambda: stream))
    monkeypatch.setattr(backend, "get_cupy", lambda: fake)
    monkeypatch.setattr(store_module, "pinned_empty", lambda shape, dtype: np.empty(shape, dtype))
    return stream


def _files(store, arrays):
    handles = []
    for i, a in enumerate(arrays):
        handle = _File(f"{store.directory}/{i:06d}.bin", a.shape, a.dtype, "cuda")
        write_file(handle.path, a)
        handles.append(handle)
    return handles


def test_a_staging_buffer_lives_until_its_copy_to_the_device_is_done(gpu, tmp_path):
    store = DiskStore(str(tmp_path))
    first, second = np.arange(6, dtype=np.float32), np.arange(6, 12, dtype=np.float32)
    handles = _files(store, [first, second])
    pending = store.begin_load(handles[0])
    staging = weakref.ref(pending.staging)
    dest = store.finish_load(pending)
    del pending
    assert staging() is not None  # the copy has not run: its source is kept
    gpu.run()
    later = store.finish_load(store.begin_load(handles[1]))  # a later load forgets finished copies
    assert staging() is None
    gpu.run()
    assert np.array_equal(dest, first) and np.array_equal(later, second)
    store.close()


def test_closing_the_store_waits_for_the_copies_in_flight(gpu, tmp_path):
    store = DiskStore(str(tmp_path))
    values = np.linspace(0, 1, 8, dtype=np.float32)
    dest = store.finish_load(store.begin_load(_files(store, [values])[0]))
    store.detach()
    assert gpu.ran == gpu.queued and np.array_equal(dest, values)
    store.close()
