"""A monitor's sampling thread ends with the monitor: at ``stop()``, and when a monitor started
and never stopped is dropped. Before, the thread held its monitor (its target was a bound
method, and the list of high-water-mark watchers held it too), so it sampled forever."""
import gc
import subprocess
import sys
import threading

import pytest

from tinymem.memory.command import CommandMonitor
from tinymem.memory.sampler import Monitor


def test_a_monitor_dropped_without_stop_ends_its_thread():
    monitor = Monitor(interval=0.001, device="cpu").start()
    thread = monitor._thread
    del monitor
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive(), "the thread of a dropped Monitor still samples"


def test_a_monitor_still_samples_until_it_is_stopped():
    monitor = Monitor(interval=0.001, device="cpu").start()
    first = len(monitor.samples)
    thread = monitor._thread
    for _ in range(500):  # at most 5 s: the thread holds the monitor weakly, yet keeps sampling
        if len(monitor.samples) >= first + 3:
            break
        thread.join(timeout=0.01)
    monitor.stop()
    assert len(monitor.samples) >= first + 3 and not thread.is_alive()


def _sampling_threads():
    return [t for t in threading.enumerate() if t.name in ("tinymem-monitor", "tinymem-command-monitor")]


def test_starting_a_running_monitor_is_refused_and_stop_ends_its_one_thread():
    # Before, a second start() made a second thread and replaced the first's stop event, so
    # stop() ended only the second one: the first sampled on until the monitor was dropped.
    before = _sampling_threads()
    monitor = Monitor(interval=0.001, device="cpu").start()
    first = monitor._thread
    with pytest.raises(RuntimeError, match="this Monitor is running already: stop"):
        monitor.start()
    monitor.stop()
    first.join(timeout=5)
    assert not first.is_alive() and _sampling_threads() == before
    monitor.start()  # a stopped monitor starts again
    monitor.stop()
    assert _sampling_threads() == before


def test_starting_a_running_command_monitor_is_refused():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(5)"])
    try:
        watcher = CommandMonitor(child.pid, interval=0.01).start()
        with pytest.raises(RuntimeError, match="this CommandMonitor is running already: stop"):
            watcher.start()
        thread = watcher._thread
        watcher.stop()
        assert not thread.is_alive()
    finally:
        child.kill()
        child.wait()
