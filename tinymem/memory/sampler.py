"""The sampler: memory as the operating system or the driver sees it, read in a background thread.

``with monitor() as m:`` (or ``track(monitor=True)``) samples three layers every ``interval``
seconds, from a thread, so the numbers come from one run:

    process    on the CPU what ``top`` shows, the resident set size (RSS) through psutil; on a GPU
               what ``nvidia-smi`` shows for this process (NVML), CUDA context and cache included
    allocator  tracemalloc's traced bytes (when tracing) on the CPU; on a GPU CuPy's pool, both
               the bytes in use and the bytes it holds with its cached blocks
    ledger     the device bytes tinymem owns

Sampling misses spikes shorter than the interval, as ``nvidia-smi`` does. On Linux the kernel
also keeps the exact high-water mark of the RSS (``VmHWM``); the monitor resets it at start and
reads it at stop, and :meth:`Monitor.peak` is the larger of the two.

``command.py`` samples another process and all its children (``tinymem monitor --``).

Cost: a sample reads ``/proc`` (or NVML) in a few microseconds; the thread holds the GIL only
while it reads, so a training step running NumPy is slowed by well under 1% at 5 ms.
"""
import ctypes
import ctypes.util
import gc
import os
import threading
import time
import tracemalloc
import weakref

import psutil

from .. import backend
from ..checks import real_number
from .ledger import LEDGER
from .nvidia import GpuReader


def _read_hwm(pid):
    """The kernel's RSS high-water mark in bytes (Linux), or ``None``."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


# Monitors of this process that reset the kernel's high-water mark and have not stopped: a new
# one's reset would erase a peak they have not read yet, so it is read and handed to them first.
_HWM_WATCHERS, _HWM_LOCK = weakref.WeakSet(), threading.Lock()  # weak: a dropped monitor leaves


def _reset_hwm(pid):
    """Reset the high-water mark to the current RSS; False where the kernel does not allow it."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def check_interval(interval):
    """``interval`` as float seconds when it is a positive, finite number a thread can wait."""
    seconds = real_number("monitor interval", interval)
    if not 0 < seconds <= threading.TIMEOUT_MAX:  # inf (or 1e10) kills the thread at its first wait
        raise ValueError(f"monitor interval must be a positive number of seconds, at most "
                         f"{threading.TIMEOUT_MAX:.3g}; got {interval!r}")
    return seconds


class SamplingThread:
    """The background thread: ``sample()`` every ``interval`` seconds until stopped. An error in
    the thread ends the sampling and is raised again by the stop, so no result hides it. The
    thread holds its sampler weakly: one dropped without a stop dies, and its thread ends."""

    interval = 0.005

    def _refuse_if_running(self):
        # A second thread would replace the first's stop event: stop() would end only the new one.
        if getattr(self, "_thread", None) is not None:
            raise RuntimeError(f"this {type(self).__name__} is running already: stop() it before "
                               "starting it again")

    def _start_thread(self, name):
        self._stop, self._error = threading.Event(), None
        self._thread = threading.Thread(target=_sample_until_stopped,
                                        args=(weakref.ref(self), self._stop, self.interval),
                                        name=name, daemon=True)
        weakref.finalize(self, self._stop.set)
        self._thread.start()

    def _stop_thread(self):
        """Stop and join the thread; False when it was not running."""
        if getattr(self, "_thread", None) is None:
            return False
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError(f"the memory sampling thread failed: {error!r}") from error
        return True


def _sample_until_stopped(sampler_ref, stop, interval):
    """The sampling thread. It holds its sampler only while it takes a sample, so that an
    unstopped sampler can die between two, which sets ``stop``."""
    while not stop.wait(interval):
        sampler = sampler_ref()
        if sampler is None:
            return
        try:
            if sampler.sample() is False:
                return  # the watched process is gone
        except BaseException as exc:  # handed to the thread that stops the sampling
            sampler._error = exc
            return
        del sampler


class Monitor(SamplingThread):
    """Samples this process (or ``pid``) every ``interval`` seconds in a daemon thread.

    ``samples`` holds tuples ``(t, process, allocator, held, ledger)``: seconds since ``t0`` and
    bytes (``allocator`` and ``held`` are ``None`` where there is nothing to read).
    """

    def __init__(self, interval=0.005, device="cpu", pid=None, t0=None, gpu_index=0):
        self.interval, self.device = check_interval(interval), backend.check_device(device)
        self.pid = os.getpid() if pid is None else int(pid)
        self.t0 = time.perf_counter() if t0 is None else t0
        self.samples, self.baseline, self.hwm = [], None, None
        if self.device == "cpu":
            process = psutil.Process(self.pid)
            self._process = lambda: process.memory_info().rss
            self._pool = None
        else:
            gpu = GpuReader(gpu_index)
            self._process = lambda: gpu.processes().get(self.pid, 0)
            self._pool = backend.get_cupy().get_default_memory_pool()
        self._hwm_reset = False

    def _allocator(self):
        if self._pool is not None:
            return self._pool.used_bytes(), self._pool.total_bytes()
        if tracemalloc.is_tracing():
            return tracemalloc.get_traced_memory()[0], None
        return None, None

    def sample(self):
        """Take one sample now (the thread calls this every interval); False, and no sample,
        once a watched process other than this one has exited."""
        allocator, held = self._allocator()
        try:
            process = self._process()
        except psutil.Error:
            return False
        self.samples.append((time.perf_counter() - self.t0, process, allocator, held, LEDGER.bytes()))
        return True

    def start(self):
        self._refuse_if_running()  # before the high-water mark is reset
        own_cpu = self.device == "cpu" and self.pid == os.getpid()
        self._hwm_seen = 0
        if own_cpu:
            with _HWM_LOCK:
                before = _read_hwm(self.pid) or 0
                for other in _HWM_WATCHERS:  # their peak so far, before the reset erases it
                    other._hwm_seen = max(other._hwm_seen, before)
                self._hwm_reset = _reset_hwm(self.pid)
                if self._hwm_reset:
                    _HWM_WATCHERS.add(self)
        else:
            self._hwm_reset = False
        if self.sample() is False:
            raise ValueError(f"process {self.pid} cannot be read (it has exited, or is not ours to read)")
        self.baseline = self.samples[-1][1]
        self._start_thread("tinymem-monitor")
        return self

    def stop(self):
        if getattr(self, "_thread", None) is None:
            return
        try:
            self._stop_thread()
            self.sample()
        finally:  # the high-water mark is read and the watcher removed even after a thread error
            if self._hwm_reset:
                with _HWM_LOCK:
                    self.hwm = max(_read_hwm(self.pid) or 0, self._hwm_seen)
                    _HWM_WATCHERS.discard(self)
            else:
                self.hwm = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- results --------------------------------------------------------------------------
    def sampled_peak(self):
        """The highest process bytes among the samples."""
        if self.baseline is None:
            raise RuntimeError("this Monitor has no samples yet: call start() (or use it as "
                               "`with monitor() as m:`) before reading its results")
        return max(s[1] for s in self.samples)

    def peak(self):
        """The highest process bytes: sampled, or the kernel's high-water mark where it is known."""
        return max(self.sampled_peak(), self.hwm or 0)

    def peak_delta(self):
        """:meth:`peak` above the bytes at start: the growth ``top`` would have shown."""
        return self.peak() - self.baseline

    def mean(self):
        self.sampled_peak()  # the same check: started, with samples
        return sum(s[1] for s in self.samples) / len(self.samples)

    def timeline(self):
        """Samples as dicts: t (s), process, allocator, held, ledger (bytes)."""
        return [dict(t=t, process=p, allocator=a, held=h, ledger=led) for t, p, a, h, led in self.samples]


def monitor(interval=0.005, device="cpu"):
    """``with monitor() as m: ...; m.peak_delta()``: sample this process in a background thread."""
    return Monitor(interval, device)


def return_free_memory(device="cpu"):
    """Give the blocks an allocator keeps after ``free`` back to the system, so that what the
    system shows for this process grows from here with every new allocation.

    On the CPU, glibc keeps freed blocks for the next ``malloc`` (the reason ``top`` never sees a
    process shrink after a step); ``malloc_trim(0)`` hands its free pages back. On a GPU, CuPy's
    pool keeps freed blocks for the next array, and NVML counts them as the process's: a step
    served from them shows no growth in ``nvidia-smi`` (``free_all_blocks`` returns them to the
    driver). Call it before watching a process grow from a known point: otherwise whatever ran
    earlier in the process (another experiment, a data set's loading, an earlier test) may have
    left enough free blocks for the step. Returns whether it could (False off glibc on the CPU:
    macOS, Windows, musl).
    """
    gc.collect()
    if backend.check_device(device) == "cuda":
        backend.get_cupy().get_default_memory_pool().free_all_blocks()
        return True
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError, TypeError):
        return False
    trim(0)
    return True
