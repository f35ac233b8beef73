"""Tracker: a window over the ledger with peaks, a timeline, a budget and the measured peak.

``with track(budget="64MB") as t:`` opens a window that records peaks and a timeline and, with a
budget, raises :class:`OutOfMemoryError` when device bytes would exceed it, as a GPU does. On
the CPU the budget simulates device memory; the lessons say so.
"""
import contextlib
import time

from .. import backend
from .ledger import BUCKETS, LEDGER, OutOfMemoryError
from .probes import CupyProbe, TracemallocProbe
from .units import format_bytes, format_table, parse_bytes

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
