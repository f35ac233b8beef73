"""A memory record made outside the ledger, shown by the timeline page and the snapshot export.

The page (``page.py``) and the snapshot (``snapshot.py``) draw a closed :class:`Tracker` window.
A :class:`Recording` is the same window built from plain rows, so a record from elsewhere (a
PyTorch step measured by ``tinymem.measure.torch_step``) is drawn by the same code:

- ``buckets``: the bucket names, in the order the page stacks them;
- ``entered``: ``(bytes, bucket, op, description)`` of each array alive when the record starts;
- ``events``: ``(time s, +-bytes, bucket, op, description)`` in time order: a positive row makes
  an array, a negative row frees the oldest live array of the same bytes, bucket, op and
  description (arrays alike in all four are alike on the page too);
- ``marks``: ``(time s, label)`` of the phases (e.g. "backward"), drawn as vertical lines.

Memory: one small object per array and one tuple per event, as a Tracker window keeps.
"""
import math
import numbers
from collections import defaultdict, deque

from ..checks import is_int
from .page import data as page_data, write as write_page
from .snapshot import build, write as write_snapshot


class RecordedArray:
    """One array of a Recording, standing where a Tracker has a ledger entry: its bytes, the op
    that made it (``label``) and what holds it (``module``, the description)."""
    __slots__ = ("nbytes", "label", "module")

    def __init__(self, nbytes, label, module):
        self.nbytes, self.label, self.module = nbytes, label, module


class Recording:
    """A finished window from rows (see the module's docstring), read as a Tracker window is."""
    closed = keep_timeline = True

    def __init__(self, buckets, entered, events, marks=()):
        self.buckets = tuple(buckets)
        if len(set(self.buckets)) != len(self.buckets) or not self.buckets:
            raise ValueError(f"buckets must be distinct names, at least one, got {buckets!r}")
        live = dict.fromkeys(self.buckets, 0)
        self.entered, self.details, self.events = {}, {}, []
        for nbytes, bucket, op, description in entered:
            self._check(bucket, nbytes, "entered")
            array = RecordedArray(nbytes, op, description)
            self.entered[array], self.details[array] = bucket, (None, None, None)
            live[bucket] += nbytes
        self._peak, self._peak_split = sum(live.values()), dict(live)
        open_arrays = defaultdict(deque)
        for array, bucket in self.entered.items():  # an entered array can be freed by an event
            open_arrays[(array.nbytes, bucket, array.label, array.module)].append(array)
        rows = ([(self._time(t, "a mark"), "mark", label) for t, label in marks]
                + [(self._time(self._row(e)[0], f"event {e!r}"), "row", e) for e in events])
        for t, kind, item in sorted(rows, key=lambda r: r[0]):  # stable: rows keep their order
            if kind == "mark":
                self.events.append((t, "mark", None, 0, item, tuple(live.values()), None))
                continue
            _, delta, bucket, op, description = item
            self._check(bucket, abs(delta), "an event")
            key = (abs(delta), bucket, op, description)
            if delta >= 0:
                array = RecordedArray(delta, op, description)
                open_arrays[key].append(array)
                self.details[array] = (None, None, None)
            elif open_arrays[key]:
                array = open_arrays[key].popleft()
            else:
                raise ValueError(f"event {item!r} frees {-delta} B of {bucket} ({op}, {description}) "
                                 "that no earlier event or entered array made")
            live[bucket] += delta
            self.events.append((t, "alloc" if delta >= 0 else "free", bucket, abs(delta), op,
                                tuple(live.values()), array))
            if sum(live.values()) > self._peak:
                self._peak, self._peak_split = sum(live.values()), dict(live)

    def _check(self, bucket, nbytes, where):
        if bucket not in self.buckets:
            raise ValueError(f"{where} names bucket {bucket!r}, not one of {self.buckets}")
        if not is_int(nbytes) or nbytes < 0:
            raise ValueError(f"{where} has bytes {nbytes!r}: give a whole number of bytes")

    @staticmethod
    def _row(event):
        if not isinstance(event, (tuple, list)) or len(event) != 5:
            raise ValueError(f"event {event!r} is not (time s, +-bytes, bucket, op, description)")
        return event

    @staticmethod
    def _time(t, where):
        """``t`` when it is a finite number: the rows are sorted by it (a NaN would scramble them)."""
        if not isinstance(t, numbers.Real) or isinstance(t, bool) or not math.isfinite(t):
            raise ValueError(f"{where} has time {t!r}: give a finite number of seconds")
        return t

    def peak(self):
        return self._peak

    def peak_by_bucket(self):
        return dict(self._peak_split)

    def export_page(self, path, title="one training step"):
        """Write the record as the timeline page (see ``page.py``)."""
        write_page(page_data(self, title), path)

    def export_snapshot(self, path, at="end"):
        """Write the record as PyTorch's memory snapshot (see ``snapshot.py``)."""
        write_snapshot(build(self, at), path)
