"""The memory ledger: who holds which bytes, where, and at what peak.

Training memory has five buckets: ``parameter`` (weights), ``gradient`` (``.grad`` of
parameters), ``optimizer`` (optimizer state), ``activation`` (tensors saved for backward) and
``workspace`` (everything else the framework allocates: op outputs, gradients flowing backward).
Each byte also has a place: ``device`` (the accelerator, or on the CPU the simulated device),
``host`` (host RAM reached by offload) or ``disk``.

Every array the framework creates is registered here by its *owning buffer* (a view is counted
through the array that owns the memory) and released by a weak-reference callback when that
buffer dies. The ledger therefore follows real lifetimes, which is why it can be held against
the allocator's own count (:meth:`Tracker.measured_peak`).

An array saved for backward is *held*: while held, a workspace array counts as ``activation``;
when the last hold is released (backward used it) it falls back to ``workspace``. Parameters,
gradients and optimizer state keep their bucket even when saved.

``with track(budget="64MB") as t:`` opens a window that records peaks and a timeline and, with a
budget, raises :class:`OutOfMemoryError` when device bytes would exceed it, as a GPU does. On
the CPU the budget simulates device memory; the lessons say so.

Memory cost of the ledger itself: one small record per live array (about 200 bytes), not
counted in any bucket.
"""
import contextlib
import re
import time
import weakref

import numpy as np

from . import backend
from .memory_probes import CupyProbe, TracemallocProbe

_ndarray = np.ndarray

BUCKETS = ("parameter", "gradient", "optimizer", "activation", "workspace")
PLACES = ("device", "host", "disk")
# When an array is registered twice, the more specific owner wins (a saved weight stays a weight).
_PRIORITY = {"workspace": 0, "activation": 1, "gradient": 2, "optimizer": 3, "parameter": 4}


class OutOfMemoryError(RuntimeError):
    """Device bytes would exceed the budget of an active :func:`track` window."""


class _Entry:
    __slots__ = ("ref", "nbytes", "place", "base", "holds", "bucket", "label")

    def __init__(self, ref, nbytes, place, base, label):
        self.ref, self.nbytes, self.place, self.base, self.holds = ref, nbytes, place, base, 0
        self.bucket, self.label = base, label


class Ledger:
    """Live bytes per (place, bucket), kept exact by weak references to owning buffers."""

    def __init__(self):
        self.entries = {}
        self.live = {(p, b): 0 for p in PLACES for b in BUCKETS}
        self.trackers = []

    # -- registration -------------------------------------------------------------------
    def register(self, array, bucket="workspace", place="device", owner=None, label=None):
        """Count ``array``'s owning buffer in ``bucket`` at ``place``; returns ``array``.

        ``owner`` is an object whose death releases the bytes, for buffers that cannot be
        weakly referenced. Registering an already known buffer only raises its bucket.
        """
        root = _root(array)
        if not hasattr(root, "__array_interface__") and not hasattr(root, "__cuda_array_interface__"):
            return array  # a NumPy scalar: a few bytes, and it cannot be weakly referenced
        if type(root).__module__ == "numpy" and not isinstance(root, _ndarray):
            return array
        key = id(root)
        entry = self.entries.get(key)
        if entry is not None:
            if _PRIORITY[bucket] > _PRIORITY[entry.base]:
                self._set_bucket(entry, bucket, base=bucket)
            return array
        self._add(key, root if owner is None else owner, int(root.nbytes), bucket, place, label)
        return array

    def register_bytes(self, owner, nbytes, bucket, place, label=None):
        """Count ``nbytes`` that are not an array (a file on disk, say) until ``owner`` dies."""
        self._add(id(owner), owner, int(nbytes), bucket, place, label)

    def _add(self, key, target, nbytes, bucket, place, label):
        if bucket not in _PRIORITY:
            raise ValueError(f"unknown bucket {bucket!r}; choose one of {', '.join(BUCKETS)}")
        if place not in PLACES:
            raise ValueError(f"unknown place {place!r}; choose one of {', '.join(PLACES)}")
        if place == "device":
            for tracker in self.trackers:
                tracker._check_budget(nbytes, bucket, label)
        ref = _weakref(target, self._release_key(key))
        self.entries[key] = _Entry(ref, nbytes, place, bucket, label)
        self.live[(place, bucket)] += nbytes
        self._event("alloc", bucket, place, nbytes, label)

    def _release_key(self, key):
        def release(ref):
            entry = self.entries.get(key)
            if entry is not None and entry.ref is ref:
                del self.entries[key]
                self.live[(entry.place, entry.bucket)] -= entry.nbytes
                self._event("free", entry.bucket, entry.place, entry.nbytes, entry.label)
        return release

    def release(self, array_or_owner):
        """Stop counting a buffer now (for storage freed by hand, such as a deleted file)."""
        root = _root(array_or_owner) if hasattr(array_or_owner, "nbytes") else array_or_owner
        entry = self.entries.get(id(root))
        if entry is not None:
            self._release_key(id(root))(entry.ref)

    # -- saved-for-backward holds ---------------------------------------------------------
    def hold(self, array):
        """Mark ``array`` as saved for backward (counted as ``activation`` while held)."""
        root = _root(array)
        entry = self.entries.get(id(root))
        if entry is None:
            self.register(array, "workspace", "device")
            entry = self.entries.get(id(root))
            if entry is None:  # a Python or NumPy scalar: nothing to count
                return
        entry.holds += 1
        if entry.holds == 1 and entry.base == "workspace":
            self._set_bucket(entry, "activation")

    def unhold(self, array):
        """Undo one :meth:`hold`; the array returns to ``workspace`` when no hold is left."""
        entry = self.entries.get(id(_root(array)))
        if entry is None or entry.holds == 0:
            return
        entry.holds -= 1
        if entry.holds == 0 and entry.bucket == "activation":
            self._set_bucket(entry, entry.base)

    def _set_bucket(self, entry, bucket, base=None):
        if base is not None:
            entry.base = base
            if entry.holds and base == "workspace":
                bucket = "activation"
        if bucket == entry.bucket:
            return
        self.live[(entry.place, entry.bucket)] -= entry.nbytes
        self._event("free", entry.bucket, entry.place, entry.nbytes, entry.label)
        entry.bucket = bucket
        self.live[(entry.place, bucket)] += entry.nbytes
        self._event("alloc", bucket, entry.place, entry.nbytes, entry.label)

    # -- queries --------------------------------------------------------------------------
    def bytes(self, bucket=None, place="device"):
        """Live bytes of one bucket (or all buckets) at one place (or ``None``: every place)."""
        places = PLACES if place is None else (place,)
        buckets = BUCKETS if bucket is None else (bucket,)
        return sum(self.live[(p, b)] for p in places for b in buckets)

    def by_bucket(self, place="device"):
        return {b: self.live[(place, b)] for b in BUCKETS}

    def _event(self, kind, bucket, place, nbytes, label):
        for tracker in self.trackers:
            tracker._record(kind, bucket, place, nbytes, label)


def _root(array):
    """The array that owns the memory a view looks at."""
    base = getattr(array, "base", None)
    while base is not None and hasattr(base, "nbytes") and hasattr(base, "base"):
        array, base = base, base.base
    return array


def _weakref(target, callback):
    return weakref.ref(target, callback)


LEDGER = Ledger()
register = LEDGER.register
register_bytes = LEDGER.register_bytes
release = LEDGER.release
hold = LEDGER.hold
unhold = LEDGER.unhold


def locate(array):
    """``(bucket, place)`` under which the ledger counts ``array``'s buffer, or ``None``.

    Techniques ask it where an array already lives: offload leaves parameters alone (they are
    resident anyway) and skips the copy for a gradient that is already on the host.
    """
    entry = LEDGER.entries.get(id(_root(array)))
    return None if entry is None else (entry.bucket, entry.place)


def holds(array):
    """How many saved-for-backward holds ``array``'s buffer has now (0: nothing saved it)."""
    entry = LEDGER.entries.get(id(_root(array)))
    return 0 if entry is None else entry.holds


def live_bytes(bucket=None, place="device"):
    """Bytes live now in ``bucket`` (all buckets when ``None``) at ``place``."""
    return LEDGER.bytes(bucket, place)


def mark(label):
    """Put a labelled marker (``"forward"``, ``"backward"``, ``"optimizer"``) on every timeline."""
    for tracker in LEDGER.trackers:
        tracker._record("mark", None, None, 0, label)


_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(value):
    """``"64MB"`` -> 64_000_000, ``"1.5GiB"`` -> 1610612736; ints pass through."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read {value!r} as a size; write e.g. 1048576, '64MB' or '1.5GiB'")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_bytes(n):
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def format_table(by_bucket, title="live device bytes"):
    """A small text table of bytes per bucket, used by errors and failing memory tests."""
    lines = [title]
    for bucket in BUCKETS:
        lines.append(f"  {bucket:<10} {by_bucket.get(bucket, 0):>14,d} B  ({format_bytes(by_bucket.get(bucket, 0))})")
    lines.append(f"  {'total':<10} {sum(by_bucket.values()):>14,d} B")
    return "\n".join(lines)


class Tracker:
    """A window over the ledger: peaks, a timeline, an optional budget and the measured peak.

    Peaks are device bytes. :meth:`peak` counts everything live on the device (what a budget
    is compared with); :meth:`peak_delta` only what came on top of the bytes live on entry.
    :meth:`measured_peak` asks the allocator (tracemalloc on NumPy, the CuPy memory pool on the
    GPU) and is, like :meth:`peak_delta`, the growth above entry: the allocator cannot see
    arrays born before the window opened. Pitfall: tracemalloc also ignores the *freeing* of
    such arrays, so free last step's gradients before opening a window you want to compare.
    """

    def __init__(self, budget=None, measure=True, timeline=True, device=None):
        self.budget = parse_bytes(budget)
        self.measure, self.keep_timeline = measure, timeline
        self.device = backend.check_device(device) if measure else None
        # Read the split once and sum it: building a dict can run the garbage collector, whose
        # frees would otherwise land between two separate reads of the ledger.
        split = LEDGER.by_bucket()
        self.start = sum(split.values())
        self._peak, self._peak_split = self.start, split
        self._bucket_max = dict(self._peak_split)
        self.events, self.t0 = [], time.perf_counter()
        self._probe = None

    def _check_budget(self, nbytes, bucket, label):
        if self.budget is not None and LEDGER.bytes() + nbytes > self.budget:
            what = f" ({label})" if label else ""
            raise OutOfMemoryError(
                f"device budget of {self.budget:,d} B ({format_bytes(self.budget)}) exceeded: "
                f"tried to allocate {nbytes:,d} B for {bucket}{what} with "
                f"{LEDGER.bytes():,d} B already live\n" + format_table(LEDGER.by_bucket())
                + "\nfree memory with a technique (checkpointing, half precision, offload) "
                  "or raise the budget")

    def _record(self, kind, bucket, place, nbytes, label):
        if place == "device":
            total = LEDGER.bytes()
            if total > self._peak:
                split = LEDGER.by_bucket()
                self._peak, self._peak_split = sum(split.values()), split
            if kind == "alloc":
                current = LEDGER.live[("device", bucket)]
                if current > self._bucket_max[bucket]:
                    self._bucket_max[bucket] = current
        if self.keep_timeline and (place == "device" or kind == "mark"):
            self.events.append((time.perf_counter() - self.t0, kind, bucket, nbytes, label,
                                tuple(LEDGER.live[("device", b)] for b in BUCKETS)))

    # -- results --------------------------------------------------------------------------
    def peak(self):
        """Highest device bytes seen in the window (bytes live on entry included)."""
        return self._peak

    def peak_delta(self):
        """Highest device bytes above what was live when the window opened."""
        return self._peak - self.start

    def peak_by_bucket(self):
        """Bytes per bucket at the moment of the peak (they sum to :meth:`peak`)."""
        return dict(self._peak_split)

    def max_by_bucket(self):
        """Each bucket's own highest value in the window (they need not coincide in time)."""
        return dict(self._bucket_max)

    def current(self):
        """Device bytes live now."""
        return LEDGER.bytes()

    def current_by_bucket(self, place="device"):
        return LEDGER.by_bucket(place)

    def measured_peak(self):
        """The allocator's peak growth above entry, in bytes (``None`` when not measured)."""
        return None if self._probe is None else self._probe.peak()

    def timeline(self):
        """Events as dicts: time (s), kind (alloc/free/mark), bucket, bytes, label, and the
        device bytes of every bucket just after the event (for a stacked plot)."""
        return [dict(t=t, kind=k, bucket=b, bytes=n, label=lab, live=dict(zip(BUCKETS, live)))
                for t, k, b, n, lab, live in self.events]

    def table(self):
        return format_table(self.peak_by_bucket(), "device bytes per bucket at the peak")


@contextlib.contextmanager
def track(budget=None, measure=True, timeline=True, device=None):
    """Open a tracking window: ``with track(budget="64MB") as t: ...; t.peak()``.

    ``budget`` (bytes or a string like ``"64MB"``) makes device allocations beyond it raise
    :class:`OutOfMemoryError`. ``measure`` also asks the allocator for its peak (tracemalloc
    slows Python code about 2x while the window is open; pass ``measure=False`` for timings).
    """
    tracker = Tracker(budget, measure, timeline, device)
    if tracker.budget is not None and tracker.start > tracker.budget:
        raise OutOfMemoryError(
            f"device budget of {tracker.budget:,d} B is already exceeded on entry\n"
            + format_table(LEDGER.by_bucket()))
    if measure:
        tracker._probe = CupyProbe() if tracker.device == "cuda" else TracemallocProbe()
    LEDGER.trackers.append(tracker)
    try:
        yield tracker
    finally:
        LEDGER.trackers.remove(tracker)
        if tracker._probe is not None:
            tracker._probe.stop()
