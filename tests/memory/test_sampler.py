"""The sampler sees what the operating system sees: a real allocation, its free, a child process."""
import os
import subprocess
import sys
import time

import numpy as np
import pytest

from tinymem import backend, memory
from tinymem.memory import nvidia
from tinymem.memory.command import CommandMonitor, format_process_table

MB = 10**6


def test_a_touched_200_mb_allocation_and_its_free_are_seen():
    with memory.monitor(interval=0.002) as m:
        time.sleep(0.05)
        block = np.ones(200 * MB // 8)  # np.ones writes every page: they become resident
        time.sleep(0.3)
        del block
        time.sleep(0.3)
    assert m.sampled_peak() - m.baseline >= 190 * MB, [s[1] for s in m.samples][::20]
    # NumPy gives a block this large back to the system at once: the last samples drop again.
    assert m.samples[-1][1] - m.baseline <= 30 * MB
    assert m.peak_delta() >= 190 * MB and m.mean() > m.baseline


def test_track_with_monitor_reports_the_process_peak_beside_the_ledger():
    with memory.track(device="cpu", monitor=0.002) as t:  # the process's RSS, whatever the default
        held = memory.register(np.ones(50 * MB // 8), "workspace")
        time.sleep(0.2)
        del held
    assert t.peak_delta() == 50 * MB
    assert 48 * MB <= t.process_peak() <= 80 * MB  # plus a little of the interpreter's own
    assert abs(t.measured_peak() - 50 * MB) <= 2 * MB
    samples = t.process_timeline()
    assert samples[0]["t"] >= 0 and {"process", "allocator", "ledger"} <= set(samples[0])
    assert max(s["ledger"] for s in samples) - samples[0]["ledger"] == 50 * MB


def test_the_kernel_high_water_mark_catches_a_spike_between_samples():
    m = memory.Monitor(interval=5.0).start()
    spike = np.ones(100 * MB // 8)
    del spike
    m.stop()
    if m.hwm is None:
        pytest.skip("this kernel does not let a process reset its RSS high-water mark")
    assert m.sampled_peak() - m.baseline < 50 * MB  # two samples, both outside the spike
    assert m.peak_delta() >= 95 * MB


def test_a_monitor_started_inside_another_keeps_the_outer_ones_spike():
    # Each start resets the kernel's high-water mark for the whole process: the inner monitor's
    # reset erased the spike the outer one had not read yet (0.1 MB seen instead of 100).
    with memory.monitor(interval=5.0) as outer:
        spike = np.ones(100 * MB // 8)
        del spike
        with memory.monitor(interval=5.0) as inner:
            time.sleep(0.01)
    if outer.hwm is None:
        pytest.skip("this kernel does not let a process reset its RSS high-water mark")
    assert outer.peak_delta() >= 95 * MB
    assert inner.peak_delta() < 50 * MB  # the spike was before the inner one started


def test_a_watched_process_that_exits_ends_the_sampling_without_an_error():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    m = memory.Monitor(interval=0.01, pid=child.pid).start()
    child.wait()
    time.sleep(0.1)
    m.stop()  # raised psutil.NoSuchProcess
    assert len(m.samples) >= 2 and m.peak() > 0


def test_bad_interval_is_refused():
    with pytest.raises(ValueError, match="positive"):
        memory.Monitor(interval=0)


def test_a_command_and_its_child_are_sampled():
    code = ("import subprocess, sys, time, numpy as np; "
            "c = subprocess.Popen([sys.executable, '-c', "
            "'import numpy as np, time; a = np.ones(12_500_000); time.sleep(1.0)']); "
            "b = np.ones(2_500_000); c.wait()")
    proc = subprocess.Popen([sys.executable, "-c", code])
    m = CommandMonitor(proc.pid, interval=0.02).start()
    proc.wait(timeout=60)
    m.stop()
    rows = m.rows()
    assert len(rows) >= 2 and proc.pid in [r["pid"] for r in rows]
    child = max(rows, key=lambda r: r["peak"])
    assert child["pid"] != proc.pid and child["peak"] >= 100 * MB
    assert all(r["mean"] <= r["peak"] for r in rows) and m.total_peak() >= child["peak"]
    table = format_process_table(rows, m.total_peak())
    assert str(child["pid"]) in table and "PID" in table
    lines = m.csv_lines()
    assert lines[0] == "t,pid,rss_bytes,gpu_bytes" and len(lines) > len(rows)


def test_nvidia_smi_csv_is_parsed():
    text = "1234, 512\n5678, 1024\n1234, 256\n[N/A], [N/A]\n99, [Not Supported]\n"
    assert nvidia.parse_apps_csv(text) == {1234: 768 * 2**20, 5678: 1024 * 2**20}
    table = nvidia.format_processes({1234: 2**20, 77: 2 * 2**20}, {1234: "python"}, this_pid=1234)
    assert table.index("77") < table.index("1234") and "(this process)" in table


needs_gpu = pytest.mark.skipif(not backend.cuda_available() or not nvidia.available(),
                               reason="needs a GPU, CuPy and NVML or nvidia-smi")


@pytest.mark.cuda
@needs_gpu
def test_nvml_sees_this_process_grow_on_the_gpu():
    cupy = backend.get_cupy()
    reader = nvidia.GpuReader()
    cupy.zeros(1, dtype=np.float32)  # create the CUDA context first: it is counted too
    before = reader.processes().get(os.getpid(), 0)
    block = cupy.ones(256 * MB // 4, dtype=np.float32)
    cupy.cuda.Device().synchronize()
    after = reader.processes().get(os.getpid(), 0)
    used, total = reader.used()
    assert after - before >= 250 * MB and 0 < used <= total, (before, after, reader.source)
    del block


@pytest.mark.cuda
@needs_gpu
def test_the_cuda_monitor_samples_nvml():
    """NVML counts the blocks CuPy's pool keeps as the process's: on the H200 the 64 MB block came
    from blocks earlier tests of the same worker had freed, and the process never grew (peak 0).
    Handing them back to the driver first makes the block a new allocation that NVML sees."""
    memory.sampler.return_free_memory("cuda")
    with memory.track(monitor=0.01, device="cuda") as t:
        block = backend.get_cupy().ones(64 * MB // 4, dtype=np.float32)
        time.sleep(0.1)
        del block
    assert t.process_peak() >= 60 * MB
    assert all(s["held"] is not None for s in t.process_timeline())


def test_returning_free_memory_empties_cupys_pool_cache(device):
    """On cuda the pool's cached blocks go back to the driver (so NVML sees the next block). A
    free part of a memory block still partly in use cannot go back: that much may stay."""
    if device == "cpu":
        pytest.skip("on the CPU it is malloc_trim, held by the watching figure's claim of RSS growth")
    pool = backend.get_cupy().get_default_memory_pool()
    memory.sampler.return_free_memory("cuda")
    stuck = pool.free_bytes()
    block = backend.get_cupy().ones(4 * MB // 4, dtype=np.float32)
    del block
    assert pool.free_bytes() >= 4 * MB  # the freed block stays cached
    assert memory.sampler.return_free_memory("cuda") is True
    assert pool.free_bytes() <= stuck
