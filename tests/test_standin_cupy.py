"""The stand-in for CuPy holds what CuPy does: it refuses NumPy operands, flushes float32
subnormals in arithmetic, counts every buffer in its pool and calls memory hooks as CuPy does.
And the backend's seam and default device route to it."""
import gc
import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest

import standin_cupy as sc
import tinymem as tm
from tinymem import backend


@pytest.fixture
def xp():
    with sc.installed():
        yield sc


def test_device_arrays_are_cuda_and_refuse_numpy_operands(xp):
    a = xp.asarray(np.arange(4, dtype=np.float32))
    assert backend.device_of(a) == "cuda" and backend.array_module(a) is xp
    assert backend.device_of(np.zeros(2)) == "cpu"
    for mixed in (lambda: a + np.ones(4, np.float32), lambda: np.maximum(a, np.zeros(4, np.float32)),
                  lambda: xp.concatenate([a, np.ones(1, np.float32)]), lambda: xp.exp(np.ones(2))):
        with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
            mixed()
    results = [a * 2.0 + np.float32(1), a.sum(), a[[0, 2]], a.copy(), xp.zeros(3), np.stack([a, a])]
    assert all(isinstance(r, xp.ndarray) for r in results)
    assert a.sum().shape == ()  # a reduction gives a 0-d device array, as on CuPy
    assert type(backend.to_numpy(a)) is np.ndarray and backend.to_numpy(a).tolist() == [0, 1, 2, 3]


def test_float32_arithmetic_flushes_subnormals_and_copies_stay_exact(xp):
    x = xp.asarray(np.array([1e-40, -1e-40, 1.0], np.float32))
    y = x * 1
    assert backend.to_numpy(y).tolist() == [0.0, 0.0, 1.0] and np.signbit(backend.to_numpy(y)[1])
    assert backend.to_numpy(x.copy())[0] == np.float32(1e-40)  # copies are exact, as on a GPU
    assert (xp.asarray(np.float32(1e-30)) * np.float32(1e-10)).item() == 0.0  # outputs flush too
    assert (xp.asarray(np.float64(1e-40)) * 1).item() == 1e-40  # float64 does not flush
    half = xp.asarray(np.float16(6e-8))
    assert (half * 1).item() > 0  # a float16 subnormal is a normal float32 in the kernel: it survives


def test_the_pool_counts_live_buffers_in_512_byte_blocks_and_caches_freed_ones(xp):
    pool = xp.get_default_memory_pool()
    gc.collect()
    used = pool.used_bytes()
    a = xp.zeros(1000, np.float32)  # 4,000 bytes -> 4,096
    view = a[10:]
    assert pool.used_bytes() - used == 4096
    del a
    assert pool.used_bytes() - used == 4096  # the view keeps the buffer alive
    del view
    gc.collect()
    assert pool.used_bytes() == used and pool.total_bytes() >= used + 4096  # cached, not returned
    pool.free_all_blocks()
    assert pool.total_bytes() == pool.used_bytes()


def test_memory_hooks_see_every_malloc_and_free_and_alloc_only_when_the_pool_grows(xp):
    calls = []

    class Hook(xp.cuda.MemoryHook):
        name = "test_hook"

        def malloc_postprocess(self, **kw):
            calls.append(("malloc", kw["size"], kw["mem_size"], sorted(kw)))

        def free_postprocess(self, **kw):
            calls.append(("free", kw["mem_size"], sorted(kw)))

        def alloc_postprocess(self, **kw):
            calls.append(("alloc", kw["mem_size"]))

    gc.collect()  # no garbage of earlier tests is freed while the hook listens
    xp.get_default_memory_pool().free_all_blocks()
    with Hook():
        a = xp.ones(100, np.float64)
        del a
        b = xp.ones(100, np.float64)  # the same block size again: reused, no alloc
        del b
    gc.collect()
    malloc_keys = ["device_id", "mem_ptr", "mem_size", "pmem_id", "size"]
    free_keys = ["device_id", "mem_ptr", "mem_size", "pmem_id"]
    malloc = ("malloc", 800, 1024, ["device_id", "mem_ptr", "mem_size", "pmem_id", "size"])
    free = ("free", 1024, ["device_id", "mem_ptr", "mem_size", "pmem_id"])
    assert calls == [("alloc", 1024), malloc, free, malloc, free]


def test_an_allocation_over_the_limit_raises_cupys_out_of_memory_error(xp):
    pool = xp.get_default_memory_pool()
    gc.collect()
    pool.free_all_blocks()
    pool.set_limit(size=pool.used_bytes() + 4096)
    try:
        keep = xp.zeros(1024, np.float32)  # exactly the 4,096 bytes left
        with pytest.raises(xp.cuda.memory.OutOfMemoryError, match="Out of memory allocating 4,096 bytes"):
            keep + 1
        assert pool.get_limit() > 0
    finally:
        pool.set_limit(size=0)


def test_the_seam_installs_and_restores_and_the_default_device_follows_it():
    before = backend._cupy
    with sc.installed():
        assert backend.get_cupy() is sc and backend.get_cupyx() is sc.cupyx
        with backend.default_device_as("cuda"):
            assert tm.get_default_device() == "cuda"
            assert isinstance(tm.tensor([3] * 4).data, sc.ndarray)
        assert tm.get_default_device() == backend.check_device(os.environ.get("TINYMEM_DEVICE") or "cpu")
    assert backend._cupy is before


def test_a_process_started_with_the_standin_switch_runs_cuda_on_it():
    code = ("import tinymem as tm; t = tm.randn(3, device='cuda'); "
            "print(type(t.data).__module__, tm.backend.get_cupy().__version__)")
    env = dict(os.environ, TINYMEM_CUDA_STANDIN="1", PYTHONPATH=str(pathlib.Path(__file__).parents[1]))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["standin_cupy", "standin"]


def test_counting_counts_launches_and_host_syncs_where_cupy_has_them(xp):
    """A ufunc, a reduction, a gather, a copy and a fused kernel are one launch each; a view, a
    reshape and an uninitialised buffer none; every read on the host is one sync."""
    from tinymem.fused import Kernel
    a = xp.asarray(np.arange(12, dtype=np.float32))
    twice = Kernel("standin_twice", "float32 x", "float32 y", lambda ops, x, y: (ops.sqrt(x * 2 + 1) - x,))
    from tinymem import fused
    fused.KERNELS.remove(twice)
    expected = {"ufunc": (lambda: a * 2, 1, 0), "reduction": (lambda: a.sum(), 1, 0),
                "gather": (lambda: a[[0, 2]], 1, 0), "copy": (lambda: a.astype(np.float16), 1, 0),
                "views": (lambda: (a[1:3], a.reshape(3, 4), xp.ascontiguousarray(a), xp.empty(5)), 0, 0),
                "fused": (lambda: twice(a, xp.empty(12, np.float32)), 1, 0),
                "reads": (lambda: (float(a[0:1].sum()), bool(a.max() > 3), a.get(), xp.asnumpy(a), a.tolist(),
                                   a[0:1].sum().item(), int(a[2:3].max())), 5, 7)}
    for what, (call, launches, syncs) in expected.items():
        with xp.counting() as counts:
            call()
        assert (counts.launches, counts.syncs) == (launches, syncs), f"{what}: {counts.report()}"
    with xp.counting() as counts:
        a * 2
        float(a.sum())
    assert "test_standin_cupy.py" in counts.report()  # each launch and sync names its line


def test_counting_sees_this_threads_launches_while_another_thread_is_inside_a_kernel():
    """The depth that keeps a launch inside another from counting twice is per thread: shared,
    a kernel in flight on another thread hid every launch of this one (counted 0 of 3)."""
    entered, release = threading.Event(), threading.Event()

    def hold_a_kernel():
        with sc.fused_kernel("held"):
            entered.set()
            release.wait(10)

    with sc.installed():
        a = sc.asarray(np.ones(10, np.float32))
        worker = threading.Thread(target=hold_a_kernel)
        worker.start()
        try:
            assert entered.wait(10)
            with sc.counting() as counts:
                for _ in range(3):
                    a + a
        finally:
            release.set()
            worker.join()
        with sc.counting() as after:
            with pytest.raises(RuntimeError):
                with sc.fused_kernel("raises"):
                    raise RuntimeError("inside a kernel")
            a * a  # the depth came back to 0 when the exception left the kernel
    assert counts.launches == 3 and after.launches == 2


def test_counting_keeps_strict_rules_a_scatter_a_draw_and_a_generator(xp):
    """Through dispatch: an in-place op (out=) and a store are launches, a 0-d index a view,
    a scatter one launch (and CuPy 13's dtypes only), a generator and each draw counted."""
    a = xp.zeros(8, np.float32)
    with xp.counting() as counts:
        a += 1
        a[2:4] = 3.0
        a[0]
        xp.cupyx.scatter_add(a, xp.asarray([1, 1]), 1.0)
        rng = xp.random.default_rng(0)
        rng.standard_normal(4)
    assert (counts.launches, counts.syncs, counts.generators) == (4, 0, 1), counts.report()
    with pytest.raises(TypeError, match="Unsupported dtype int8 for scatter_add"):
        xp.add.at(xp.zeros(4, np.int8), xp.asarray([0]), 1)


def test_a_fused_kernels_temporaries_take_no_pool_memory(xp):
    """On a GPU the body's intermediates live in registers: only its outputs are device memory."""
    from tinymem import fused
    poly = fused.Kernel("standin_poly", "float32 x", "float32 y", lambda ops, x, y: ((x * 2 + 1) * x - x,))
    fused.KERNELS.remove(poly)
    x, y = xp.ones(1 << 12, np.float32), xp.empty(1 << 12, np.float32)

    class Mallocs(xp.MemoryHook):
        name, count = "mallocs", 0

        def malloc_postprocess(self, **kwargs):
            self.count += 1

    with Mallocs() as mallocs, xp.counting() as counts:
        poly(x, y)
    assert (mallocs.count, counts.launches) == (0, 1) and y[:2].tolist() == [2.0, 2.0]


def test_device_arrays_refuse_implicit_conversion_to_numpy_as_cupy_does(xp):
    a = xp.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert not isinstance(a, np.ndarray)  # so CuPy's branches of tinymem run in CI
    for implicit in (lambda: np.asarray(a), lambda: np.array(a), lambda: np.testing.assert_array_equal(a, a),
                     lambda: np.asarray(a[0])):
        with pytest.raises(TypeError, match="Implicit conversion to a NumPy array is not allowed"):
            implicit()
    assert type(a.get()) is np.ndarray and type(xp.asnumpy(a)) is np.ndarray and a.get().tolist() == [[0, 1, 2], [3, 4, 5]]


def test_a_numpy_index_array_is_refused_in_every_device_op(xp):
    a = xp.zeros(4, np.float32)
    host = np.array([0, 1])
    for op in (lambda: a[host], lambda: a.__setitem__(host, 1.0), lambda: a.take(host),
               lambda: xp.take(a, host), lambda: xp.cupyx.scatter_add(a, host, 1.0), lambda: xp.add.at(a, host, 1.0),
               lambda: a.__setitem__(slice(None), np.ones(4, np.float32))):
        with pytest.raises(TypeError, match="Unsupported type <class 'numpy.ndarray'>"):
            op()
    a[xp.asarray([0, 0])] = 2.0  # device indices, lists and slices are fine
    assert a[[0, 3]].tolist() == [2.0, 0.0]


def test_integer_indexing_gives_a_0d_device_array_with_no_index_or_round(xp):
    a = xp.asarray(np.array([1.6, 2.0, 3.0], np.float32))
    x = a[0]
    assert isinstance(x, xp.ndarray) and x.shape == () and x.base is a  # a view, as in CuPy
    assert float(x) == np.float32(1.6) and int(a[1]) == 2 and bool(a[2]) and f"{x:.1f}" == "1.6"
    with pytest.raises(TypeError):
        round(x)
    with pytest.raises(TypeError):
        [0, 1][a[1]]  # no __index__: CuPy arrays are not Python integers
    assert all(isinstance(v, xp.ndarray) and v.shape == () for v in a)


def test_views_point_at_their_owner_and_linalg_stays_on_the_device(xp):
    a = xp.asarray(np.arange(12, dtype=np.float64).reshape(3, 4))
    assert a.base is None and a[1:].base is a and a.T.base is a and a.reshape(4, 3).base is a
    assert a.copy().base is None and a.astype(np.float64, copy=False) is a
    out = xp.empty((3, 4))
    assert xp.multiply(a, 2.0, out=out) is out
    u, s, vt = xp.linalg.svd(a, full_matrices=False)
    assert all(isinstance(m, xp.ndarray) for m in (u, s, vt))
    np.testing.assert_allclose(((u * s) @ vt).get(), a.get(), atol=1e-12)
    indices = xp.asarray([5, -1])
    assert a.ravel().take(indices).tolist() == [5.0, 11.0]  # CuPy's take: no mode, out of range wraps
