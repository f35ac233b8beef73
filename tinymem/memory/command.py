"""``tinymem monitor -- command``: run a command, sample it and its children, pass signals on, reap it.

:class:`CommandMonitor` samples process ``pid`` and all its children every ``interval`` seconds:
their RSS, and their GPU bytes through NVML when given a :class:`GpuReader`. An exited process
not yet reaped (a zombie, 0 bytes resident) is not a sample.

:func:`wait_forwarding_signals` waits for the command as a shell would. SIGTERM, SIGINT and
SIGHUP sent to the monitor go on to the command (a Ctrl-C in a terminal has reached it already
and is not sent twice); a second signal kills it, so a command that ignores the first still
ends. The command is always reaped, and its exit status returned as the shell gives it: its
code, or 128 + N when signal N ended it. It reaps with ``wait4``, whose ``ru_maxrss`` is the
kernel's peak RSS of the command (or of its largest waited-for child): the peak of a command
too short to be sampled.

Cost: a sample lists the process tree and reads each process's ``/proc`` entries (tens of
microseconds per process).
"""
import os
import signal
import subprocess
import sys
import time

import psutil

from .sampler import SamplingThread, check_interval
from .units import format_bytes

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# ru_maxrss is in kilobytes on Linux and the BSDs, in bytes on macOS.
_MAXRSS_UNIT = 1 if sys.platform == "darwin" else 1024


class CommandMonitor(SamplingThread):
    """Samples process ``pid`` and its children (recursively) every ``interval`` seconds.

    ``samples`` holds ``(t, {pid: rss}, {pid: gpu bytes})``; ``names`` maps each pid seen to its
    process name. GPU bytes are read when ``gpu`` (a :class:`GpuReader`) is given.
    """

    def __init__(self, pid, interval=0.05, gpu=None):
        self.interval = check_interval(interval)
        try:
            self.root = psutil.Process(pid)
        except (psutil.Error, TypeError, ValueError) as exc:  # psutil's own errors name no argument
            raise ValueError(f"CommandMonitor: process {pid!r} cannot be watched ({exc})") from None
        self.gpu = gpu
        self.samples, self.names, self.t0 = [], {}, time.perf_counter()
        self.kernel_peak = None  # ru_maxrss of the reaped command, set by whoever reaps it

    def sample(self):
        try:
            procs = [self.root] + self.root.children(recursive=True)
        except psutil.Error:  # the command has exited
            return
        rss = {}
        for p in procs:
            try:
                if p.status() == psutil.STATUS_ZOMBIE:  # exited, not reaped: 0 bytes, not a sample
                    continue
                rss[p.pid] = p.memory_info().rss
                if p.pid not in self.names:
                    self.names[p.pid] = p.name()
            except psutil.Error:  # a child that ended between the listing and the read
                continue
        gpu = {}
        if self.gpu is not None:
            gpu = {pid: n for pid, n in self.gpu.processes().items() if pid in rss}
        if rss:
            self.samples.append((time.perf_counter() - self.t0, rss, gpu))

    def start(self):
        self._refuse_if_running()
        self.sample()
        self._start_thread("tinymem-command-monitor")
        return self

    def stop(self):
        self._stop_thread()

    def rows(self):
        """One row per process seen: pid, name, peak and mean RSS, device and its peak bytes."""
        device = "cpu" if self.gpu is None else f"gpu{self.gpu.index}"
        rows = []
        for pid in sorted({pid for _, rss, _ in self.samples for pid in rss}):
            seen = [rss[pid] for _, rss, _ in self.samples if pid in rss]
            gpu = [g.get(pid, 0) for _, rss, g in self.samples if pid in rss]
            rows.append({"pid": pid, "name": self.names.get(pid, "?"), "peak": max(seen),
                         "mean": int(sum(seen) / len(seen)), "device": device,
                         "device_peak": max(gpu) if self.gpu is not None else None,
                         "samples": len(seen)})
        return rows

    def total_peak(self):
        """The highest sum over all the processes at one sample (what the machine had to hold),
        or the kernel's peak of the command where that is higher (a run too short to sample)."""
        sampled = max((sum(rss.values()) for _, rss, _ in self.samples), default=0)
        return max(sampled, self.kernel_peak or 0)

    def csv_lines(self):
        """``t,pid,rss_bytes,gpu_bytes`` lines, one per process per sample."""
        lines = ["t,pid,rss_bytes,gpu_bytes"]
        for t, rss, gpu in self.samples:
            lines += [f"{t:.4f},{pid},{n},{gpu.get(pid, '')}" for pid, n in sorted(rss.items())]
        return lines


def wait_forwarding_signals(proc):
    """Wait for the ``subprocess.Popen`` ``proc`` and reap it: ``(exit status, kernel peak RSS
    in bytes)``. The exit status is the shell's: the code, or 128 + N for signal N (137 for
    SIGKILL, 143 for SIGTERM). While it waits, the signals in ``FORWARDED`` go to the command;
    the second one sends SIGKILL. However this returns or raises, the command is not left
    running. Signal handlers can only be set from the main thread: elsewhere nothing is
    forwarded."""
    received, reaped = [], False

    def forward(signum, frame):
        received.append(signum)
        if reaped:  # only this thread reaps: until then the pid is still the command's
            return
        if len(received) > 1:
            os.kill(proc.pid, signal.SIGKILL)
        elif not _from_terminal(signum, proc.pid):
            os.kill(proc.pid, signum)

    previous = {}
    try:
        for signum in FORWARDED:
            previous[signum] = signal.signal(signum, forward)
    except ValueError:  # not the main thread
        pass
    try:
        _, status, usage = os.wait4(proc.pid, 0)  # retried by Python when a handler interrupts it
        reaped = True
        code = os.waitstatus_to_exitcode(status)
        proc.returncode = code  # Popen must not wait for it again
        return (128 - code if code < 0 else code), usage.ru_maxrss * _MAXRSS_UNIT
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if not reaped:  # an error while waiting: end the command rather than leave it behind
            proc.kill()
            proc.wait()


def _from_terminal(signum, pid):
    """Whether ``signum`` is a Ctrl-C (or hang-up) the terminal sent to this whole foreground
    process group, process ``pid`` included: sent again, a second KeyboardInterrupt would cut
    short the command's own clean-up. (A command that made its own group did not get it.)"""
    if signum not in (signal.SIGINT, signal.SIGHUP):
        return False
    try:
        if os.getpgid(pid) != os.getpgrp():
            return False
    except OSError:
        return False
    for fd in (0, 1, 2):  # the first standard stream that is the terminal (others may be files)
        try:
            return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def start_command(command, interval, gpu=None):
    """Start ``command`` (a list) and a :class:`CommandMonitor` on it: ``(proc, monitor)``.
    Raises OSError when the command cannot be run."""
    interval = check_interval(interval)
    proc = subprocess.Popen(command)
    return proc, CommandMonitor(proc.pid, interval, gpu).start()


def format_process_table(rows, total_peak=None):
    """The process list, as ``nvidia-smi`` prints its own: pid, name, device, peak, mean; with
    ``total_peak`` a last line for all of them together."""
    head = f"{'PID':>8}  {'process':<20} {'device':<7} {'peak':>12} {'mean':>12} {'device peak':>12}"
    lines = [head, "-" * len(head)]
    for r in rows:
        dev = "-" if r["device_peak"] is None else format_bytes(r["device_peak"])
        lines.append(f"{r['pid']:>8}  {r['name'][:20]:<20} {r['device']:<7} {format_bytes(r['peak']):>12} "
                     f"{format_bytes(r['mean']):>12} {dev:>12}")
    if total_peak is not None:
        lines.append(f"{'all':>8}  {'(together)':<20} {'':<7} {format_bytes(total_peak):>12}")
    return "\n".join(lines)
