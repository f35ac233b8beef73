"""A tracking window as one self-contained HTML page: memory over the step, stacked by bucket.

The page (``timeline.html`` beside this file, with the window's numbers inlined as JSON) needs
no network: its drawing is a small script of its own on an SVG. It shows the device bytes of
each bucket after every event, the phase marks, and the peak with its exact byte count.
Hovering over a bucket's band names the array under the pointer (shape, dtype, bytes, bucket,
module, op, the user's line); a click lists every array live at that moment, largest first.

What is inlined: one record per array life (bucket, bytes, first and last event, and indices
into tables of modules, ops and descriptions), and the stacked series. A window longer than
``MAX_POINTS`` events is drawn from the event of highest total in each of ``MAX_POINTS`` bins
(the peak's event always among them); the records and the peak's numbers are never thinned.
Size: about 40 bytes per array and per drawn point.
"""
import html
import json
import os
import re

from ..measure.files import write_atomically
from .attribution import describe
from .snapshot import check_window, peak_index
from .units import format_bytes

MAX_POINTS = 2000
TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "timeline.html")


class _Table:
    """Strings stored once; records hold their index."""

    def __init__(self):
        self.index, self.items = {}, []

    def __call__(self, text):
        if text not in self.index:
            self.index[text] = len(self.items)
            self.items.append(text)
        return self.index[text]


def data(tracker, title):
    """The page's numbers: a JSON-ready dict (see the module's docstring)."""
    if not isinstance(title, str):
        raise TypeError(f"the page's title must be a str, e.g. 'one training step', got {type(title).__name__}")
    check_window(tracker)
    modules, ops, details = _Table(), _Table(), _Table()
    arrays, open_lives, xs, series, marks = [], {}, [], [], []

    def begin(entry, bucket, x, detail):
        shape, dtype, site = detail
        text = (f"{dtype} {shape}" if shape is not None else "bytes") + (
            f" @ {os.path.basename(site[0])}:{site[1]} ({site[2]})" if site is not None else "")
        module = "(model)" if entry.module == "" else entry.module or f"(no module: {bucket})"
        open_lives[entry] = len(arrays)
        arrays.append([tracker.buckets.index(bucket), entry.nbytes, x, -1, details(text), modules(module),
                       ops(entry.label or "-")])

    for entry, bucket in tracker.entered.items():
        begin(entry, bucket, -1, tracker.details.get(entry) or describe(entry, site=False))
    x = 0
    for _, kind, bucket, _, label, live, entry in tracker.events:
        if kind == "mark":
            marks.append([x, label])
            continue
        if kind == "alloc":
            begin(entry, bucket, x, tracker.details[entry])
        else:
            arrays[open_lives.pop(entry)][3] = x
        xs.append(x)
        series.append(list(live))
        x += 1
    peak_x = sum(1 for e in tracker.events[:peak_index(tracker) + 1] if e[1] != "mark") - 1
    drawn = _thin(series, peak_x)
    return {"title": title, "buckets": list(tracker.buckets), "events": x, "entered": sum(e.nbytes for e in tracker.entered),
            "drawn": [[i] + series[i] for i in drawn], "marks": marks, "arrays": arrays,
            "modules": modules.items, "ops": ops.items, "details": details.items,
            "peak": {"bytes": tracker.peak(), "text": format_bytes(tracker.peak()), "x": peak_x,
                     "by_bucket": tracker.peak_by_bucket()}}


def _thin(series, peak_x):
    """Indices of the events to draw: all of them, or the highest of each bin and the peak."""
    n = len(series)
    if n <= MAX_POINTS:
        return list(range(n))
    keep = {peak_x} if peak_x >= 0 else set()
    for b in range(MAX_POINTS):
        lo, hi = b * n // MAX_POINTS, (b + 1) * n // MAX_POINTS
        if hi > lo:
            keep.add(max(range(lo, hi), key=lambda i: sum(series[i])))
    return sorted(keep)


def render(numbers):
    """The page's HTML text for :func:`data`'s dict. Every string goes in as text: the title
    HTML-escaped, the JSON with ``<``, ``>`` and ``&`` as ``\\u003c``-style escapes (so no
    ``</script>`` or ``<!--`` inside a name can end or bend the script), both markers
    replaced in one pass (a name holding a marker is not replaced again). A title character UTF-8
    cannot hold (a lone surrogate: a command-line byte that is not UTF-8, as python decodes it) is
    shown as its escape, ``\\udcff``, as python's tracebacks show it."""
    with open(TEMPLATE, encoding="utf-8") as f:
        template = f.read()
    payload = json.dumps(numbers, separators=(",", ":"))
    for char in "<>&":
        payload = payload.replace(char, f"\\u{ord(char):04x}")
    title = html.escape(numbers["title"].encode("utf-8", "backslashreplace").decode("utf-8"))
    return _MARKERS.sub(lambda m: payload if m.group(0) == "/*DATA*/null" else title, template)


_MARKERS = re.compile(r"/\*DATA\*/null|<!--TITLE-->")


def write(numbers, path):
    """Write the page of :func:`data`'s dict to ``path`` atomically."""
    text = render(numbers).encode("utf-8")
    write_atomically(path, lambda f: f.write(text), suffix=".html")
