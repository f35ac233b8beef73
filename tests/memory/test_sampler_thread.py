"""A monitor's sampling thread ends with the monitor: at ``stop()``, and when a monitor started
and never stopped is dropped. Before, the thread held its monitor (its target was a bound
method, and the list of high-water-mark watchers held it too), so it sampled forever."""
import gc

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
