"""Tracker: a window over the ledger with peaks, a timeline, a budget and the measured peak.

``with track(budget="64MB") as t:`` opens a window that records peaks and a timeline and, with a
budget, raises :class:`OutOfMemoryError` when device bytes would exceed it, as a GPU does. On
the CPU the budget simulates device memory; the lessons say so. ``shared="name"`` puts several
processes on one simulated device, ``monitor=True`` samples what ``top``/``nvidia-smi`` see, and
``top()`` / ``by_module()`` say which module and op hold the bytes at the peak.
"""
import contextlib
import gc
import os
import time

from .. import backend
from ..checks import positive_int
from . import attribution, page, snapshot
from .ledger import BUCKETS, LEDGER, OutOfMemoryError
from .sampler import Monitor, check_interval
from .probes import CupyProbe, TracemallocProbe
from .shared import SharedDevice, default_fraction, gpu_processes_text
from .units import format_bytes, format_table, parse_bytes


class Tracker:
    """A window over the ledger: peaks, a timeline, an optional budget and the measured peak.

    Peaks are device bytes. :meth:`peak` counts everything live on the device (what a budget
    is compared with); :meth:`peak_delta` only what came on top of the bytes live on entry.
    :meth:`measured_peak` asks the allocator (tracemalloc on NumPy, the CuPy memory pool on the
    GPU) and :meth:`process_peak` the operating system or the driver (with ``monitor``); both
    are, like :meth:`peak_delta`, the growth above entry. Pitfall: tracemalloc also ignores the
    *freeing* of arrays born before the window, so free last step's gradients before opening a
    window you want to compare.

    Memory: a timeline tuple per event (``timeline=False`` for long windows), and for the
    attribution at the peak one dict slot per live device array plus the events since the peak.
    With the timeline, each array born in the window also keeps a small record (shape, dtype,
    the user's file and line: about 300 bytes) for :meth:`export_snapshot` and the timeline page.
    """
    buckets = BUCKETS  # the page stacks these, in this order (a Recording names its own)

    def __init__(self, budget=None, measure=True, timeline=True, device=None, monitor=False,
                 shared=None, fraction=None):
        self.budget = parse_bytes(budget)
        self.measure, self.keep_timeline = measure, timeline
        self.device = backend.check_device(device)  # what measure= and monitor= read
        if shared is None and fraction is not None:
            raise ValueError("fraction= caps a process on a shared device: pass shared='name' too")
        self.shared_name, self.fraction = shared, fraction
        self.monitor_interval = check_interval(0.005 if monitor is True else monitor) if monitor else None
        self.events, self.t0 = [], time.perf_counter()
        self.start = self._peak = 0
        self._peak_split = self._bucket_max = dict.fromkeys(BUCKETS, 0)
        self._probe = self._monitor = self._shared = None
        self._live, self._since_peak, self._peak_state = {}, [], None
        self.entered, self.details, self.closed = {}, {}, False

    # -- opening and closing ----------------------------------------------------------------
    def _open(self):
        if self.shared_name is not None:
            fraction = self.fraction if self.fraction is not None else default_fraction()
            self._shared = SharedDevice(self.shared_name, self.budget, fraction)
            self.budget = self._shared.budget
        if self.measure:
            self._probe = CupyProbe() if self.device == "cuda" else TracemallocProbe()
        if self.monitor_interval:
            self._monitor = Monitor(self.monitor_interval, self.device, t0=self.t0).start()
        # Snapshot and start listening with the collector paused and the ledger locked: no
        # weakref callback (of this thread) and no other thread may change the ledger between
        # the snapshot and the first event, or the attribution would drift.
        collecting = gc.isenabled()
        gc.disable()
        try:
            with LEDGER.lock:
                self._live = {e: e.bucket for e in list(LEDGER.entries.values()) if e.place == "device"}
                if self.keep_timeline:  # what the window started with, for a snapshot's first state
                    self.entered = dict(self._live)
                split = LEDGER.by_bucket()
                self.start = self._peak = sum(split.values())
                self._peak_split, self._bucket_max = split, dict(split)
                LEDGER.trackers.append(self)
        finally:
            if collecting:
                gc.enable()
        if self._shared is not None:
            self._shared.reserve(0, self.start, " (the arrays live on entry)")
        elif self.budget is not None and self.start > self.budget:
            raise OutOfMemoryError(f"device budget of {self.budget:,d} B is already exceeded on entry\n"
                                   + format_table(LEDGER.by_bucket()))

    def _close(self):
        self.closed = True
        with LEDGER.lock:  # not while another thread's event walks the list
            if self in LEDGER.trackers:
                LEDGER.trackers.remove(self)
        try:
            for part in (self._probe, self._monitor):
                if part is not None:
                    part.stop()
        finally:  # a sampling thread's error must not keep this process's seat on a shared device
            if self._shared is not None:
                self._shared.close()

    # -- listening to the ledger ------------------------------------------------------------
    def _check_budget(self, nbytes, bucket, label):
        what = f" for {bucket}" + (f" ({label})" if label else "")
        if self._shared is not None:
            try:
                self._shared.reserve(LEDGER.bytes(), nbytes, what)
            except OutOfMemoryError:
                if not LEDGER.pagers:
                    raise
                # As under a private budget: the pagers free what the device lacks, then one more
                # try. Only on a refusal: asking first would lock the shared device twice per array.
                LEDGER.page_out(LEDGER.bytes() + nbytes - self._shared_room())
                self._shared.reserve(LEDGER.bytes(), nbytes, what)
        elif self.budget is not None and LEDGER.bytes() + nbytes > self.budget:
            if LEDGER.pagers:  # pagers (a paged optimizer) move bytes to the host first
                LEDGER.page_out(LEDGER.bytes() + nbytes - self.budget)
            if LEDGER.bytes() + nbytes <= self.budget:
                return
            raise OutOfMemoryError(
                f"device budget of {self.budget:,d} B ({format_bytes(self.budget)}) exceeded: "
                f"tried to allocate {nbytes:,d} B{what} with "
                f"{LEDGER.bytes():,d} B already live\n" + format_table(LEDGER.by_bucket())
                + "\nfree memory with a technique (checkpointing, half precision, offload) "
                  "or raise the budget" + (gpu_processes_text(os.getpid()) if self.device == "cuda" else ""))

    def _shared_room(self):
        """The most device bytes this process may hold on its shared device now: the budget less
        what the other processes hold, and at most its own limit (``fraction``)."""
        others = sum(b for pid, b in self._shared.processes().items() if pid != self._shared.pid)
        room = self._shared.budget - others
        return room if self._shared.limit is None else min(room, self._shared.limit)

    def _record(self, kind, bucket, place, nbytes, label, entry=None):
        if place == "device":
            if entry is not None:  # keep the live set, so the peak's entries can be rebuilt
                if kind == "alloc":
                    self._live[entry] = bucket
                else:
                    self._live.pop(entry, None)
            total = LEDGER.bytes()
            if total > self._peak:
                split = LEDGER.by_bucket()
                self._peak, self._peak_split = sum(split.values()), split
                self._since_peak.clear()
                self._peak_state = None
            elif entry is not None and self._peak_state is None:  # once folded, the peak's state is known
                self._since_peak.append((kind, entry, bucket))
                if len(self._since_peak) > 2 * len(self._live) + 1000:
                    self._peak_state, self._since_peak = self.peak_entries(), []
            if kind == "alloc":
                current = LEDGER.live["device"][bucket]
                if current > self._bucket_max[bucket]:
                    self._bucket_max[bucket] = current
            if self._shared is not None:
                self._shared.update(total)
        if self.keep_timeline and (place == "device" or kind == "mark"):
            if entry is not None and entry not in self.details:
                self.details[entry] = attribution.describe(entry)
            self.events.append((time.perf_counter() - self.t0, kind, bucket, nbytes, label,
                                tuple(LEDGER.live["device"][b] for b in BUCKETS), entry))

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

    def process_peak(self):
        """The process's peak growth above entry as the operating system (RSS) or the driver
        (NVML) sees it, in bytes (``None`` without ``monitor``)."""
        return None if self._monitor is None else self._monitor.peak_delta()

    def process_timeline(self):
        """The monitor's samples as dicts: t (s, on the timeline's clock), process, allocator,
        held and ledger bytes (empty without ``monitor``)."""
        return [] if self._monitor is None else self._monitor.timeline()

    def timeline(self):
        """Events as dicts: time (s), kind (alloc/free/mark), bucket, bytes, label, and the
        device bytes of every bucket just after the event (for a stacked plot)."""
        return [dict(t=t, kind=k, bucket=b, bytes=n, label=lab, live=dict(zip(BUCKETS, live)))
                for t, k, b, n, lab, live, _ in self.events]

    def peak_entries(self):
        """``{ledger entry: bucket}`` of the device arrays live at the peak: the live set now,
        with the events since the peak undone."""
        with LEDGER.lock:  # another thread's event changes the live set and the log together
            if self._peak_state is not None:  # the log was folded into the peak's state
                return dict(self._peak_state)
            live, since_peak = dict(self._live), list(self._since_peak)
        for kind, entry, bucket in reversed(since_peak):
            if kind == "alloc":
                live.pop(entry, None)
            else:
                live[entry] = bucket
        return live

    def top(self, n=10, model=None):
        """The ``n`` largest arrays live at the peak: dicts of module, op, bucket and bytes.
        With ``model``, weights and gradients are named by their module too."""
        n = positive_int("top: n (how many arrays)", n)  # -1 would slice off the last row
        params = attribution.parameter_paths(model) if model is not None else None
        return attribution.top_rows(self.peak_entries().items(), n, params)

    def by_module(self, model=None, depth=None):
        """Device bytes per module path at the peak; they sum to :meth:`peak` exactly. Arrays
        made outside any forward count under ``(no module: bucket)`` unless ``model`` names
        its weights and gradients; ``depth`` merges paths below that many parts."""
        if depth is not None:
            depth = positive_int("by_module: depth (path parts kept)", depth)
        params = attribution.parameter_paths(model) if model is not None else None
        return attribution.sum_by_module(self.peak_entries().items(), params, depth)

    def table(self):
        return format_table(self.peak_by_bucket(), "device bytes per bucket at the peak")

    def export_snapshot(self, path):
        """Write the window as PyTorch's memory snapshot (``torch.cuda.memory._snapshot()``,
        pickled) to ``path``: open it at pytorch.org/memory_viz. See ``snapshot.py``."""
        snapshot.write(snapshot.build(self), path)

    def export_page(self, path, title="one training step"):
        """Write the window as one self-contained HTML page (no network needed to view it):
        memory stacked by bucket, the phase marks, the peak, each array on hover. See ``page.py``."""
        page.write(page.data(self, title), path)


@contextlib.contextmanager
def track(budget=None, measure=True, timeline=True, device=None, monitor=False, shared=None, fraction=None):
    """Open a tracking window: ``with track(budget="64MB") as t: ...; t.peak()``.

    ``budget`` (bytes or a string like ``"64MB"``) makes device allocations beyond it raise
    :class:`OutOfMemoryError`. ``measure`` also asks the allocator for its peak (tracemalloc
    slows Python code about 2x while the window is open; pass ``measure=False`` for timings).
    ``monitor`` (True, or a sampling interval in seconds) samples the process in a thread.
    ``shared`` names a simulated device that processes share (its budget is set by the first);
    ``fraction`` caps this process at that share of it.

    A window is the process's, not the thread's: it counts every thread's device arrays, and its
    budget refuses an allocation in any thread that would pass it (the threads share the device).
    """
    tracker = Tracker(budget, measure, timeline, device, monitor, shared, fraction)
    try:
        tracker._open()
        yield tracker
    finally:
        tracker._close()
