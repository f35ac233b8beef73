"""Several real processes on one simulated device: the OOM names the others, the dead are
reclaimed, fractions cap each process, and the device queue runs jobs one after the other."""
import multiprocessing
import os
import signal
import tempfile
import time
import uuid

import numpy as np
import pytest

from tinymem import backend, memory
from tinymem.memory.shared import SharedDevice, default_fraction

SPAWN = multiprocessing.get_context("spawn")
BUDGET = 10_000_000


@pytest.fixture
def name():
    """A fresh device name; its lock files are removed afterwards (the library keeps them, as
    removing a lock file another process may be about to open is a race)."""
    device = f"test-{uuid.uuid4().hex[:12]}"
    yield device
    for kind in ("lock", "queue"):
        path = os.path.join(tempfile.gettempdir(), f"tinymem-{device}.{kind}")
        if os.path.exists(path):
            os.remove(path)


def _hold(name, budget, nbytes, ready, stop):
    """A process that takes ``nbytes`` of the shared device and keeps them until told."""
    with memory.track(budget=budget, shared=name, measure=False):
        block = memory.register(np.ones(nbytes // 8), "workspace")
        ready.set()
        stop.wait(60)
        del block


def _start_holder(name, nbytes):
    ready, stop = SPAWN.Event(), SPAWN.Event()
    proc = SPAWN.Process(target=_hold, args=(name, BUDGET, nbytes, ready, stop))
    proc.start()
    assert ready.wait(60), "the holder process did not start"
    return proc, stop


def test_the_second_process_gets_an_oom_naming_the_first_with_its_bytes(name):
    proc, stop = _start_holder(name, 6_000_000)
    try:
        with pytest.raises(memory.OutOfMemoryError) as info:
            with memory.track(shared=name, measure=False):
                memory.register(np.ones(6_000_000 // 8), "workspace")
        message = str(info.value)
        assert str(proc.pid) in message and "6,000,000 B" in message, message
        assert str(os.getpid()) in message and "(this process)" in message
        # What fits beside the first process is allowed.
        with memory.track(shared=name, measure=False) as t:
            small = memory.register(np.ones(3_000_000 // 8), "workspace")
            assert t._shared.processes() == {proc.pid: 6_000_000, os.getpid(): 3_000_000}
            del small
    finally:
        stop.set()
        proc.join(30)


def test_a_killed_process_is_reclaimed(name):
    proc, _ = _start_holder(name, 6_000_000)
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    with memory.track(shared=name, measure=False) as t:  # the budget stays with the device
        assert t.budget == BUDGET
        block = memory.register(np.ones(6_000_000 // 8), "workspace")
        assert t._shared.processes() == {os.getpid(): 6_000_000}
        del block


def _queued(name, hold, out, barrier):
    barrier.wait(60)  # both ask at once: a slow start under load must not make the queue look unused
    with memory.device_queue(name) as ticket:
        start = time.time()
        time.sleep(hold)
        out.put((os.getpid(), start, time.time(), ticket.waited))


def test_the_device_queue_runs_jobs_one_after_the_other(name):
    out, barrier = SPAWN.Queue(), SPAWN.Barrier(2)
    procs = [SPAWN.Process(target=_queued, args=(name, 0.4, out, barrier)) for _ in range(2)]
    for p in procs:
        p.start()
    runs = sorted(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    (_, s1, e1, w1), (_, s2, e2, w2) = sorted(runs, key=lambda r: r[1])
    assert s2 >= e1 - 0.01, runs  # the second started when the first had finished
    assert max(w1, w2) >= 0.3  # and waited for it


def test_the_queue_times_out(name):
    with memory.device_queue(name):
        proc = SPAWN.Process(target=_expect_timeout, args=(name,))
        proc.start()
        proc.join(60)
    assert proc.exitcode == 0


def _expect_timeout(name):
    try:
        with memory.device_queue(name, timeout=0.2):
            raise SystemExit(1)
    except TimeoutError:
        raise SystemExit(0)


def test_a_fraction_caps_one_process_however_empty_the_device(name):
    with pytest.raises(memory.OutOfMemoryError, match="own limit of 5,000,000 B"):
        with memory.track(budget=BUDGET, shared=name, fraction=0.5, measure=False):
            memory.register(np.ones(6_000_000 // 8), "workspace")
    with memory.track(budget=BUDGET, shared=name, fraction=0.5, measure=False) as t:
        block = memory.register(np.ones(4_000_000 // 8), "workspace")
        assert t.peak() - t.start == 4_000_000
        del block


def test_set_per_process_memory_fraction_is_the_default_on_the_cpu(name):
    memory.set_per_process_memory_fraction(0.3, device="cpu")
    try:
        assert default_fraction() == 0.3
        with pytest.raises(memory.OutOfMemoryError, match="own limit"):
            with memory.track(budget=BUDGET, shared=name, measure=False, device="cpu"):
                memory.register(np.ones(4_000_000 // 8), "workspace")
    finally:
        memory.set_per_process_memory_fraction(None, device="cpu")
    with pytest.raises(ValueError, match="fraction"):
        memory.set_per_process_memory_fraction(1.5)


def test_device_names_come_from_cuda_visible_devices():
    assert memory.device_name({}) == "cuda0"
    assert memory.device_name({"CUDA_VISIBLE_DEVICES": "1,2"}) == "cuda1"
    with pytest.raises(ValueError, match="hides every device"):
        memory.device_name({"CUDA_VISIBLE_DEVICES": ""})


def test_bad_names_budgets_and_fractions_are_refused(name):
    with pytest.raises(ValueError, match="letters, digits"):
        SharedDevice("no/slashes", BUDGET)
    with pytest.raises(ValueError, match="must give it a budget"):
        SharedDevice(name)
    with pytest.raises(ValueError, match="pass shared="):
        with memory.track(budget=BUDGET, fraction=0.5):
            pass
    first = SharedDevice(name, BUDGET)
    try:
        out = SPAWN.Queue()
        proc = SPAWN.Process(target=_open_with, args=(name, BUDGET + 1, out))
        proc.start()
        message = out.get(timeout=60)
        proc.join(30)
        assert "pass the same budget or none" in message, message
    finally:
        first.close()
    assert not os.path.exists(f"/dev/shm/tinymem_{name}")  # the last one out removes the table


def test_a_device_refused_for_want_of_a_budget_leaves_no_segment(name):
    """``track(shared=NAME)`` with no budget raised, but left its new segment behind."""
    with pytest.raises(ValueError, match="must give it a budget"):
        with memory.track(shared=name, measure=False):
            pass
    assert not os.path.exists(f"/dev/shm/tinymem_{name}")


def test_nested_windows_on_one_device_keep_the_process_seated(name):
    """Two nested windows shared one slot, and the inner one's exit removed the whole table:
    the process held its bytes unseen by the others, and the outer exit raised
    FileNotFoundError."""
    with memory.track(budget=BUDGET, shared=name, measure=False):
        block = memory.register(np.ones(8_000_000 // 8), "workspace")
        with memory.track(budget=BUDGET, shared=name, measure=False):
            pass
        assert os.path.exists(f"/dev/shm/tinymem_{name}")
        out = SPAWN.Queue()
        proc = SPAWN.Process(target=_take, args=(name, 4_000_000, out))
        proc.start()
        message = out.get(timeout=60)
        proc.join(30)
        assert "other processes hold" in message, message  # the 8 MB here are still seen
        del block
    assert not os.path.exists(f"/dev/shm/tinymem_{name}")


def _take(name, nbytes, out):
    try:
        with memory.track(shared=name, measure=False):
            memory.register(np.ones(nbytes // 8), "workspace")
        out.put("given")
    except memory.OutOfMemoryError as exc:
        out.put(str(exc))


def test_a_nan_timeout_on_a_busy_device_is_refused_not_waited_forever(name):
    with memory.device_queue(name):
        proc = SPAWN.Process(target=_nan_timeout, args=(name,))
        proc.start()
        proc.join(60)
        if proc.exitcode is None:
            proc.kill()
    assert proc.exitcode == 0


def _nan_timeout(name):
    try:
        with memory.device_queue(name, timeout=float("nan")):
            raise SystemExit(1)
    except ValueError:
        raise SystemExit(0)


def _open_with(name, budget, out):
    try:
        SharedDevice(name, budget).close()
        out.put("opened")
    except ValueError as exc:
        out.put(str(exc))


@pytest.mark.cuda
@pytest.mark.skipif(not backend.cuda_available(), reason="needs CuPy and a GPU")
def test_a_gpu_fraction_limits_cupys_pool():
    cupy = backend.get_cupy()
    total = cupy.cuda.Device().mem_info[1]
    memory.set_per_process_memory_fraction(0.01, device="cuda")
    try:
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
            cupy.empty(int(0.02 * total), dtype=np.uint8)
        block = cupy.empty(int(0.005 * total), dtype=np.uint8)
        del block
    finally:
        memory.set_per_process_memory_fraction(None, device="cuda")


def _hold_on_gpu(name, budget, nbytes, fraction, ready, stop, out):
    """A process on the real GPU: CuPy's pool capped at ``fraction`` of the GPU, ``nbytes`` of
    it held in the shared table until told; reports whether its pool refused twice its cap."""
    cupy = backend.get_cupy()
    memory.set_per_process_memory_fraction(fraction, device="cuda")
    with memory.track(budget=budget, shared=name, measure=False, device="cuda"):
        block = memory.register(cupy.ones(nbytes // 4, dtype=np.float32), "workspace")
        try:
            cupy.empty(int(2 * fraction * cupy.cuda.Device().mem_info[1]), dtype=np.uint8)
            out.put("not refused")
        except cupy.cuda.memory.OutOfMemoryError:
            out.put("refused")
        ready.set()
        stop.wait(60)
        del block


@pytest.mark.cuda
@pytest.mark.skipif(not backend.cuda_available(), reason="needs CuPy and a GPU")
def test_two_processes_on_one_gpu_each_capped_by_cupys_pool_and_the_shared_table(name):
    """A second process on the GPU: CuPy's per-process limit refuses, in each, what passes its
    fraction of the GPU, and the shared table refuses what would pass the budget of both, naming
    the first process with its bytes."""
    ready, stop, out = SPAWN.Event(), SPAWN.Event(), SPAWN.Queue()
    proc = SPAWN.Process(target=_hold_on_gpu, args=(name, BUDGET, 6_000_000, 0.02, ready, stop, out))
    proc.start()
    try:
        assert ready.wait(120), "the GPU holder process did not start"
        assert out.get(timeout=10) == "refused"
        cupy = backend.get_cupy()
        with pytest.raises(memory.OutOfMemoryError) as info:
            with memory.track(shared=name, measure=False, device="cuda"):
                memory.register(cupy.ones(6_000_000 // 4, dtype=np.float32), "workspace")
        assert str(proc.pid) in str(info.value) and "6,000,000 B" in str(info.value)
        memory.set_per_process_memory_fraction(0.02, device="cuda")
        try:
            with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
                cupy.empty(int(0.04 * cupy.cuda.Device().mem_info[1]), dtype=np.uint8)
        finally:
            memory.set_per_process_memory_fraction(None, device="cuda")
    finally:
        stop.set()
        proc.join(60)


def _publish(name, ready, stop):
    device = SharedDevice(name, BUDGET)
    ready.set()
    n = 0
    while not stop.is_set():
        device.update(n % BUDGET)  # as fast as a ledger event loop
        n += 4096
    device.close()


def test_a_busy_process_is_never_taken_for_dead(name):
    # Regression: a slot written with struct.pack_into is zeroed for an instant before it is
    # filled; a reader that caught the zero took a live process for dead and cleared its row.
    ready, stop = SPAWN.Event(), SPAWN.Event()
    proc = SPAWN.Process(target=_publish, args=(name, ready, stop))
    proc.start()
    try:
        assert ready.wait(60)
        device = SharedDevice(name, BUDGET)
        try:
            deadline = time.time() + 1.5
            while time.time() < deadline:
                assert proc.pid in device.processes()
        finally:
            device.close()
    finally:
        stop.set()
        proc.join(30)
