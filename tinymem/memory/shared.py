"""One device, several processes: a table of per-process device bytes in shared memory.

``track(budget="64MB", shared="gpu0")`` in several processes puts them on one simulated device.
A table in ``multiprocessing.shared_memory``, named after the device, holds each process's pid
and device bytes; a file lock makes "check the sum, then reserve" atomic across processes. A
process whose allocation would push the sum over the budget gets an OutOfMemoryError that lists
the other processes with their pid and bytes, as ``nvidia-smi`` lists them. Entries of processes
that died (killed, crashed) are reclaimed at the next check, as the driver frees a dead
process's memory.

The cures for a crowded device, each measured in the lesson on watching memory:
    fraction        each process a fixed share of the budget (:func:`set_per_process_memory_fraction`,
                    PyTorch's name; on a GPU it limits CuPy's pool)
    device_queue    a file lock that queues jobs, so they run one after the other
    device_name     the device from ``CUDA_VISIBLE_DEVICES``: one job per device

Layout: a 16-byte header (budget, slot count), then ``SLOTS`` slots of four int64 (pid, bytes,
own limit, start time in ms). Cost: a flock and an unlock (microseconds) per check; one 8-byte
write per ledger event. Unix only (``fcntl``).
"""
import contextlib
import fcntl
import os
import re
import struct
import tempfile
import threading
import time
from multiprocessing import resource_tracker, shared_memory

import psutil

from .. import backend
from . import owned
from ..checks import real_number
from .ledger import OutOfMemoryError
from .nvidia import GpuReader, NvidiaUnavailable, format_processes
from .units import format_bytes

SLOTS = 64
_HEADER, _SLOT, _INT = struct.Struct("qq"), struct.Struct("qqqq"), struct.Struct("q")
_SIZE = _HEADER.size + SLOTS * _SLOT.size
_FRACTION = {"cpu": None}
# Open seats of this process, per (device name, pid): nested windows on one device share the
# process's one slot, and only the last to close gives it up.
_SEATS = {}


def _check_name(name):
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        raise ValueError(f"a shared device name is 1-64 letters, digits, '_', '.' or '-', got {name!r}")
    return name


def _lock_path(name, kind):
    return os.path.join(tempfile.gettempdir(), f"tinymem-{name}.{kind}")


@contextlib.contextmanager
def _flock(fd):
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def _open_segment(name, gid):
    """Attach to the table of device ``name``, creating it if absent; ``(shm, created)``. Only
    a table of this user's (or of group ``gid``) is joined (:mod:`.owned`).

    The segment's lifetime is ours, not Python's resource tracker's: by default every process
    that attaches would unlink it at exit, under the feet of the others still running."""
    seg, what = f"tinymem_{name}", f"the shared device's table /dev/shm/tinymem_{name}"
    try:
        shm, created = shared_memory.SharedMemory(seg, create=True, size=_SIZE), True
    except FileExistsError:
        try:
            shm, created = shared_memory.SharedMemory(seg), False
        except (OSError, ValueError) as exc:  # not ours to open, or an empty segment
            raise PermissionError(f"{what} exists but cannot be joined ({exc}): refusing it; "
                                  "use another device name, or remove it if it is yours") from None
    resource_tracker.unregister(shm._name, "shared_memory")
    try:
        if created:
            owned.claim(shm._fd, gid)
        else:
            owned.check_owner(shm._fd, what, gid)
        if shm.size < _SIZE:
            raise PermissionError(f"{what} is {shm.size} bytes, not a table of {_SIZE}: refusing it; "
                                  "remove it if it is yours")
    except BaseException:
        shm.close()
        raise
    return shm, created


def _started_ms(pid):
    try:
        return int(psutil.Process(pid).create_time() * 1000)
    except psutil.Error:
        return -1


def _alive(pid, started):
    """Is ``pid`` the same live process as when it took its slot (not a zombie, not reused)?"""
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE and int(p.create_time() * 1000) == started
    except psutil.Error:
        return False


class SharedDevice:
    """This process's seat at the table of device ``name``.

    ``budget`` (bytes) is fixed by the first process; later ones may pass the same or ``None``.
    ``fraction`` caps this process at ``fraction * budget`` however empty the device is.
    The lock file and the table are this user's (mode 0o600), or ``group``'s (a name or gid,
    default ``$TINYMEM_SHARED_GROUP``; mode 0o660) so that users of one group can share a device;
    one that belongs to anybody else is refused with a PermissionError (:mod:`.owned`).
    """

    def __init__(self, name, budget=None, fraction=None, group=None):
        self.name, self.pid = _check_name(name), os.getpid()
        if fraction is not None and not 0 < real_number("fraction", fraction) <= 1:
            raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
        gid, path = owned.resolve_group(group), _lock_path(name, "lock")
        self.shm, self._fd = None, owned.open_private(path, f"the shared device's lock {path}", gid)
        self._thread_lock = threading.Lock()  # flock does not exclude threads sharing the fd
        try:
            with self._locked():
                self.shm, created = _open_segment(name, gid)
                try:
                    self._sit_down(budget, fraction, created)
                except BaseException:
                    if created:  # a table nobody could use: do not leave the segment behind
                        self._unlink()
                    raise
        except BaseException:
            self._release_handles()
            raise

    def _sit_down(self, budget, fraction, created):
        """Fix or check the budget and take this process's slot (lock held)."""
        current, _ = _HEADER.unpack_from(self.shm.buf, 0)
        live = 0 if created else self._reclaim()
        if budget is not None and int(budget) != current:
            if live:
                raise ValueError(f"the shared device {self.name!r} has a budget of {current:,d} B; "
                                 f"pass the same budget or none, not {int(budget):,d} B")
            current = int(budget)  # nobody alive uses the device: the new budget holds
            _HEADER.pack_into(self.shm.buf, 0, current, SLOTS)
        if current <= 0:
            raise ValueError(f"the shared device {self.name!r} does not exist yet: the first "
                             "process must give it a budget")
        self.budget = current
        self.limit = None if fraction is None else int(fraction * current)
        self.slot = self._take_slot()
        _SEATS[self.name, self.pid] = _SEATS.get((self.name, self.pid), 0) + 1

    @contextlib.contextmanager
    def _locked(self):
        with self._thread_lock, _flock(self._fd):
            yield

    def _slots(self):
        for i in range(SLOTS):
            yield i, _SLOT.unpack_from(self.shm.buf, _HEADER.size + i * _SLOT.size)

    def _write(self, i, pid, nbytes, limit, started):
        _SLOT.pack_into(self.shm.buf, _HEADER.size + i * _SLOT.size, pid, nbytes, limit, started)

    def _reclaim(self):
        """Clear the slots of dead processes (lock held); returns how many live ones remain."""
        live = 0
        for i, (pid, _, _, started) in self._slots():
            if pid == 0:
                continue
            if pid != self.pid and not _alive(pid, started):
                self._write(i, 0, 0, 0, 0)
            else:
                live += 1
        return live

    def _take_slot(self):
        free = None
        for i, (pid, _, _, _) in self._slots():
            if pid == self.pid:
                free = i
                break
            if pid == 0 and free is None:
                free = i
        if free is None:
            raise RuntimeError(f"the shared device {self.name!r} already seats {SLOTS} processes")
        self._write(free, self.pid, 0, -1 if self.limit is None else self.limit, _started_ms(self.pid))
        return free

    # -- use --------------------------------------------------------------------------------
    def processes(self):
        """``{pid: device bytes}`` of the live processes on the device (this one included)."""
        with self._locked():
            self._reclaim()
            return {pid: nbytes for _, (pid, nbytes, _, _) in self._slots() if pid}

    def update(self, nbytes):
        """Publish this process's device bytes. No lock: only this process writes its slot, and
        one aligned 8-byte copy is seen whole by a reader. (``struct.pack_into`` would not do:
        it zeroes the field before it writes, and a reader under the lock could catch the 0.)"""
        at = _HEADER.size + self.slot * _SLOT.size + 8
        self.shm.buf[at:at + 8] = _INT.pack(int(nbytes))

    def reserve(self, own, nbytes, what=""):
        """Check that this process may grow from ``own`` to ``own + nbytes`` bytes and publish it;
        raise :class:`OutOfMemoryError` naming the other processes when it may not."""
        with self._locked():
            self._reclaim()
            used = {pid: b for _, (pid, b, _, _) in self._slots() if pid}
            others = sum(b for pid, b in used.items() if pid != self.pid)
            if self.limit is not None and own + nbytes > self.limit:
                raise OutOfMemoryError(self._message(
                    f"over its own limit of {self.limit:,d} B ({self.limit / self.budget:.0%} of the device)",
                    own, nbytes, what, used))
            if own + nbytes + others > self.budget:
                raise OutOfMemoryError(self._message(
                    f"the device is full: other processes hold {others:,d} B ({format_bytes(others)})",
                    own, nbytes, what, used))
            self.update(own + nbytes)

    def _message(self, reason, own, nbytes, what, used):
        used = dict(used)
        used[self.pid] = own
        names = {}
        for pid in used:
            try:
                names[pid] = psutil.Process(pid).name()
            except psutil.Error:
                names[pid] = "?"
        return (f"shared device {self.name!r} ({self.budget:,d} B, {format_bytes(self.budget)}) out of "
                f"memory: process {self.pid} tried to allocate {nbytes:,d} B{what} holding {own:,d} B; "
                f"{reason}\nprocesses on {self.name!r}:\n{format_processes(used, names, self.pid)}\n"
                "cures: give each process a fraction of the device (fraction=0.5), queue the jobs "
                f"(with tm.memory.device_queue({self.name!r})), or put them on different devices "
                "(CUDA_VISIBLE_DEVICES)")

    def _release_handles(self):
        if self.shm is not None:
            self.shm.close()
            self.shm = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _unlink(self):
        # unlink() tells the resource tracker too, so hand the name back to it first
        resource_tracker.register(self.shm._name, "shared_memory")
        self.shm.unlink()

    def close(self):
        """Leave the table (the slot stays while another window of this process still sits on
        this device); the last process to leave removes it."""
        if self.shm is None:
            return
        with self._locked():
            key = (self.name, self.pid)
            _SEATS[key] -= 1
            if not _SEATS[key]:
                del _SEATS[key]
                self._write(self.slot, 0, 0, 0, 0)
            if self._reclaim() == 0:
                self._unlink()
        self._release_handles()


def set_per_process_memory_fraction(fraction, device=None):
    """Cap this process at ``fraction`` of the device, as ``torch.cuda.set_per_process_memory_fraction``.

    On a GPU it limits CuPy's memory pool (``pool.set_limit(fraction=...)``): an allocation past
    it raises CuPy's OutOfMemoryError even with the GPU half empty. On the CPU it is the default
    ``fraction`` of every later ``track(shared=...)`` window. ``None`` lifts the cap."""
    if fraction is not None and not 0 < real_number("fraction", fraction) <= 1:
        raise ValueError(f"fraction must be in (0, 1] or None, got {fraction!r}")
    device = backend.check_device(device)
    if device == "cuda":
        backend.get_cupy().get_default_memory_pool().set_limit(fraction=fraction or 0)
    else:
        _FRACTION["cpu"] = fraction


def default_fraction():
    return _FRACTION["cpu"]


class _Wait:
    waited = 0.0


@contextlib.contextmanager
def device_queue(name, timeout=None, poll=0.01, group=None):
    """Hold device ``name`` for the body: other jobs entering ``device_queue(name)`` wait.

    A file lock, so it works across unrelated processes and is freed when a holder dies. Yields
    an object whose ``waited`` is the seconds spent in the queue. ``timeout`` (seconds) raises
    TimeoutError instead of waiting longer. The lock file is this user's, or ``group``'s (as
    for :class:`SharedDevice`); one of another user's is refused."""
    if timeout is not None and not real_number("device_queue timeout", timeout) >= 0:  # NaN: forever
        raise ValueError(f"device_queue timeout must be a number of seconds >= 0 or None, got {timeout!r}")
    path = _lock_path(_check_name(name), "queue")
    fd = owned.open_private(path, f"the device queue {path}", owned.resolve_group(group))
    ticket, start = _Wait(), time.perf_counter()
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if timeout is None else fcntl.LOCK_NB))
                break
            except BlockingIOError:
                if time.perf_counter() - start > timeout:
                    raise TimeoutError(f"device {name!r} stayed busy for {timeout} s") from None
                time.sleep(poll)
        ticket.waited = time.perf_counter() - start
        try:
            yield ticket
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def device_name(environ=None):
    """The device a job should use, from ``CUDA_VISIBLE_DEVICES``: ``"cuda0"``, ``"cuda1"``, ...

    Launching each job with its own ``CUDA_VISIBLE_DEVICES`` is the plainest cure: jobs on
    different devices never compete. Unset means device 0."""
    env = os.environ if environ is None else environ
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return "cuda0"
    first = visible.split(",")[0].strip()
    if not first or first == "-1":
        raise ValueError("CUDA_VISIBLE_DEVICES hides every device; give the job one (e.g. 0)")
    return f"cuda{first}"


def gpu_processes_text(this_pid=None):
    """The NVML process list of GPU 0 for an OOM message, or ``""`` where it cannot be read."""
    try:
        return "\nprocesses on the GPU:\n" + format_processes(GpuReader().processes(), None, this_pid)
    except (NvidiaUnavailable, OSError):
        return ""
