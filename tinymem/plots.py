"""Shared plotting helpers: records -> matplotlib figures, on the Agg backend (no display).

Every family draws its own figures in its experiment module with these helpers, so all the
figures share one look (fonts readable at the README's width), carry the machine, version and
date they were measured on, say in one sentence what to see, and print a claim of the figure
that did not hold in red under it. :func:`save` also checks the layout (:func:`layout_problems`)
and warns about text that is too small, clipped or overprinted and legends that cover data.
"""
import os
import textwrap
import warnings

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .measure.timing import spread  # noqa: E402
from .memory import BUCKETS  # noqa: E402

BUCKET_COLORS = {"parameter": "#4c72b0", "gradient": "#dd8452", "optimizer": "#55a868",
                 "activation": "#c44e52", "workspace": "#8c8c8c"}
MIN_FONT = 8          # points; a figure is shown at about half its size in the README
BACKGROUND = "background"  # gid of artists a legend or a label may cover (shaded ranges)
INSIDE = "inside"          # gid of a label meant to sit on its bar
plt.rcParams.update({"font.size": 10, "axes.titlesize": 10, "axes.labelsize": 10,
                     "xtick.labelsize": 9, "ytick.labelsize": 9, "legend.fontsize": 8,
                     "legend.title_fontsize": 8, "figure.titlesize": 11})


class LayoutWarning(UserWarning):
    """A figure has text too small to read, clipped or overprinted, or a legend over its data."""


def new_figure(ncols=1, nrows=1, width=6.4, height=4.2):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes.ravel() if nrows * ncols > 1 else axes[0, 0]


def device_label(records):
    """How to name the device: on the CPU it is the ledger's simulated device."""
    return "GPU" if records.get("meta", {}).get("device") == "cuda" else "simulated device (CPU)"


def footer_lines(records, note=None, width_chars=120):
    """``[(text, color)]`` under a figure: what to see, each failed claim, the machine line."""
    lines = []
    if note:
        lines += [(line, "#222222") for line in textwrap.wrap(note, width_chars)]
    for row in records.get("claims", []):
        if row.get("holds") is False:
            value = row["value"] if not isinstance(row["value"], float) else f"{row['value']:.4g}"
            lines += [(line, "#d62728") for line in
                      textwrap.wrap(f"CLAIM DOES NOT HOLD: {row['text']} (measured {value})", width_chars)]
    meta = records.get("meta", {})
    text = (f"{meta.get('machine', '?')} · {device_label(records)} · tinymem {meta.get('tinymem', '?')}"
            f" · {meta.get('date', 'date unknown')}")
    if meta.get("quick"):
        text += " · QUICK MODE (small sizes)"
    # A narrow figure (one panel) cannot hold the machine line on one row: wrapped, not clipped.
    return lines + [(line, "#666666") for line in textwrap.wrap(text, width_chars)]


def stamp(fig, records, note=None):
    """Write ``note`` (what to see), the failed claims (red) and the machine, version and date
    under the figure, growing it so the axes keep their size; returns the height used (inches)."""
    width, height = fig.get_size_inches()
    lines = footer_lines(records, note, width_chars=int(width * 72 / (MIN_FONT * 0.55)))
    line_h = MIN_FONT * 1.45 / 72
    extra = line_h * len(lines) + 0.05
    fig.set_size_inches(width, height + extra)
    for i, (text, color) in enumerate(reversed(lines)):
        fig.text(0.01, (0.03 + i * line_h) / (height + extra), text, fontsize=MIN_FONT, color=color,
                 weight="bold" if color == "#d62728" else "normal")
    return extra


def save(fig, records, outdir, name, note=None):
    """Stamp (:func:`stamp`), lay out, check (:func:`layout_problems`, as warnings) and write
    ``outdir/name``; returns the path."""
    extra = stamp(fig, records, note)
    height = fig.get_size_inches()[1]
    fig.tight_layout(rect=(0, extra / height, 1, 1))
    for ax in fig.axes:
        for labels, offsets in getattr(ax, "_tinymem_labels", []):
            _place_labels(ax, labels, offsets)
    for problem in layout_problems(fig):
        warnings.warn(f"{name}: {problem}", LayoutWarning, stacklevel=2)
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name)
    tmp = path + ".tmp.png"
    try:
        fig.savefig(tmp, dpi=120)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def _medians_and_quartiles(samples, scale):
    """Spreads of each list of timings, their medians times ``scale`` and the distances from
    each median to its quartiles (matplotlib's asymmetric ``yerr``)."""
    stats = [spread(s) for s in samples]
    medians = [s["median"] * scale for s in stats]
    errors = [[(s["median"] - s["q1"]) * scale for s in stats], [(s["q3"] - s["median"]) * scale for s in stats]]
    return stats, medians, errors


def timing_bars(ax, xs, samples, width, colors, label=None, scale=1e3):
    """Bars at the median of each list of timings (seconds, drawn times ``scale``) with the
    interquartile range as error bars; the axis starts at 0. Returns the spreads."""
    stats, medians, errors = _medians_and_quartiles(samples, scale)
    ax.bar(xs, medians, width, color=colors, label=label, yerr=errors, capsize=3,
           error_kw={"elinewidth": 1.2, "ecolor": "k"})
    ax.set_ylim(bottom=0)
    return stats


def timing_line(ax, xs, samples, scale=1e3, **kwargs):
    """A line through the medians of each list of timings with interquartile error bars."""
    stats, medians, errors = _medians_and_quartiles(samples, scale)
    ax.errorbar(xs, medians, yerr=errors, capsize=3, **kwargs)
    return stats


def stacked_timeline(ax, timeline, title=None, ylabel="device memory (MiB)", legend=True):
    """Device bytes per bucket over the events of a step, stacked, with the phase marks as dashed
    lines whose labels stand slanted above the plot (close marks do not overprint), and the
    legend outside on the right (it covers nothing)."""
    xs = [e["t"] * 1e3 for e in timeline if e["kind"] != "mark"]
    layers = [[e["live"][b] / 2**20 for e in timeline if e["kind"] != "mark"] for b in BUCKETS]
    ax.stackplot(xs, layers, labels=BUCKETS, colors=[BUCKET_COLORS[b] for b in BUCKETS],
                 step="post", alpha=0.9)
    top = max((sum(col) for col in zip(*layers)), default=1.0)
    ax.set_ylim(0, top * 1.05)
    marks = [e for e in timeline if e["kind"] == "mark"]
    transform = matplotlib.transforms.blended_transform_factory(ax.transData, ax.transAxes)
    span = (max(xs) - min(xs)) if len(xs) > 1 else 1.0
    last, drawn = None, []  # marks closer than 6% of the axis share one label ("optimizer / step 2: forward")
    for e in marks:
        x = e["t"] * 1e3
        ax.axvline(x, color="k", lw=0.8, ls="--").set_gid(BACKGROUND)
        if last is not None and (x - last[0]) < 0.06 * span:
            last[1].set_text(last[1].get_text() + " / " + e["label"])
            continue
        text = ax.text(x, 1.01, e["label"], transform=transform, fontsize=MIN_FONT, rotation=35,
                       rotation_mode="anchor", ha="left", va="bottom", clip_on=False)
        last = (x, text)
        drawn.append(text)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel(ylabel)
    if legend:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), reverse=True)
    if title:
        longest = max((len(t.get_text()) for t in drawn), default=0)  # a shared label is the longest
        ax.set_title(title, pad=8 + 0.6 * longest * MIN_FONT * 0.6)


# -- layout checks ---------------------------------------------------------------------------------
def _ticklabels(axis):
    """The tick labels an axis actually draws (those of ticks inside the view)."""
    lo, hi = sorted(axis.get_view_interval())
    out = []
    for ticks, locs in ((axis.get_major_ticks(), axis.get_majorticklocs()),
                        (axis.get_minor_ticks(), axis.get_minorticklocs())):
        for tick, loc in zip(ticks, locs):
            if lo - 1e-9 * abs(hi - lo) <= loc <= hi + 1e-9 * abs(hi - lo):
                out += [t for t in (tick.label1, tick.label2) if t.get_visible() and t.get_text().strip()]
    return out


def _texts(fig):
    """(text, owner) for every text drawn: titles, labels, tick labels, annotations, figure text."""
    found = [(t, "figure") for t in fig.texts]  # fig.suptitle is among them
    for ax in fig.axes:
        found += [(t, ax) for t in (ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label)]
        found += [(t, ax) for t in ax.texts]
        found += [(t, ax) for t in _ticklabels(ax.xaxis) + _ticklabels(ax.yaxis)]
    return [(t, owner) for t, owner in found if t.get_visible() and t.get_text().strip()]


def _data_paths(ax, renderer):
    """Display-space (path, filled) of an axes' data: lines, bars and patches, collections."""
    out = []
    for line in ax.lines:
        if line.get_gid() != BACKGROUND and line.get_visible() and len(line.get_xydata()):
            if line.get_linestyle() not in ("None", "", " "):
                out.append((line.get_transform().transform_path(line.get_path()), False))
            if line.get_marker() not in (None, "None", "", " "):
                for xy in line.get_transform().transform(line.get_xydata()):
                    out.append((matplotlib.path.Path.circle(xy, 2), True))
    for patch in ax.patches:
        if patch.get_gid() != BACKGROUND and patch.get_visible():
            out.append((patch.get_transform().transform_path(patch.get_path()), patch.get_fill()))
    for coll in ax.collections:
        if coll.get_gid() == BACKGROUND or not coll.get_visible():
            continue
        offsets = coll.get_offsets()
        if len(offsets) and isinstance(coll, matplotlib.collections.PathCollection):
            for xy in coll.get_offset_transform().transform(offsets):
                out.append((matplotlib.path.Path.circle(xy, 3), True))
        else:
            filled = not isinstance(coll, matplotlib.collections.LineCollection)
            out += [(coll.get_transform().transform_path(p), filled) for p in coll.get_paths()]
    return out


def _inset(box, pixels):
    """``box`` made smaller by ``pixels`` on every side (touching is not covering)."""
    return matplotlib.transforms.Bbox.from_extents(box.x0 + pixels, box.y0 + pixels,
                                                   max(box.x0 + pixels, box.x1 - pixels),
                                                   max(box.y0 + pixels, box.y1 - pixels))


def _hits(box, paths):
    inner = _inset(box, 2)
    return any(len(p.vertices) and p.intersects_bbox(inner, filled=filled) for p, filled in paths)


def layout_problems(fig):
    """What a reader would trip over, as sentences: text under ``MIN_FONT``; text outside the
    figure (clipped); two texts or a text and a legend on top of each other; a legend or an
    annotation over the data (lines, markers, bars, filled areas; artists with gid ``BACKGROUND``
    may be covered, annotations with gid ``INSIDE`` may sit on a bar)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    problems, boxes = [], []
    fig_box = fig.bbox.padded(1)
    for text, owner in _texts(fig):
        name = repr(text.get_text()[:40])
        if text.get_fontsize() < MIN_FONT - 1e-6:
            problems.append(f"text {name} is {text.get_fontsize():g} pt (readable: >= {MIN_FONT})")
        box = matplotlib.text.Text.get_window_extent(text, renderer)  # an annotation's text, not its arrow
        if not (fig_box.contains(box.x0, box.y0) and fig_box.contains(box.x1, box.y1)):
            problems.append(f"text {name} is clipped by the figure's edge")
        boxes.append((name, box, text))
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None and legend.get_visible():
            # Only where the legend lies over the axes: data beyond them is clipped, not drawn
            # (a line whose last sample sits past the x limit, under a legend outside the axes).
            box = legend.get_window_extent(renderer)
            over = matplotlib.transforms.Bbox.intersection(box, ax.get_window_extent(renderer))
            if over is not None and _hits(over, _data_paths(ax, renderer)):
                problems.append(f"the legend of {ax.get_title()[:40]!r} covers data")
            boxes.append((f"legend of {ax.get_title()[:40]!r}", box, None))
        paths = _data_paths(ax, renderer)
        for text in ax.texts:
            if text.get_gid() != INSIDE and text.get_visible() and text.get_text().strip() \
                    and _hits(matplotlib.text.Text.get_window_extent(text, renderer), paths):
                problems.append(f"label {text.get_text()[:40]!r} sits on the data")
    for i, (a, box_a, text_a) in enumerate(boxes):
        for b, box_b, text_b in boxes[i + 1:]:
            if _inset(box_a, 1.5).overlaps(_inset(box_b, 1.5)) and not _parallel_apart(text_a, text_b, renderer):
                problems.append(f"{a} overlaps {b}")
    return problems


# Where a point's label may go, in points from the point, tried in this order.
LABEL_OFFSETS = ((4, -10), (4, 4), (-4, 4), (-4, -10), (7, -3), (-7, -3), (0, 9), (0, -15))


def label_points(ax, labels, offsets=LABEL_OFFSETS):
    """Ask :func:`save` to label points of ``ax``: each ``(text, (x, y), color)`` goes at the
    first offset of ``offsets`` where it stays inside the axes and covers neither data nor a
    text already there (the first offset when none is free: :func:`layout_problems` then says
    so). Placed by :func:`save` once the figure is laid out, when the data sit where they will
    be drawn (a label placed before ``tight_layout`` can land on a line that moved)."""
    ax._tinymem_labels = getattr(ax, "_tinymem_labels", []) + [(labels, offsets)]


def _place_labels(ax, labels, offsets, **text_kwargs):
    """Annotate now (see :func:`label_points`); returns the annotations."""
    fig = ax.figure
    fig.canvas.draw()  # settles autoscaled limits, so data positions are final
    renderer = fig.canvas.get_renderer()
    paths, frame = _data_paths(ax, renderer), _inset(ax.get_window_extent(renderer), 3)
    taken = [matplotlib.text.Text.get_window_extent(t, renderer) for t in ax.texts]
    legend = ax.get_legend()
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    kwargs = {"fontsize": 8, "textcoords": "offset points", **text_kwargs}
    placed = []

    def put(text, xy, color, offset):
        # a label left of its point ends there, one above or below is centred on it
        align = "right" if offset[0] < 0 else "center" if offset[0] == 0 else "left"
        label = ax.annotate(text, xy, xytext=offset, color=color, ha=align, **kwargs)
        label.update_positions(renderer)  # an annotation finds its place when drawn, else now
        return label, matplotlib.text.Text.get_window_extent(label, renderer)

    for text, xy, color in labels:
        for offset in offsets:
            label, box = put(text, xy, color, offset)
            if (frame.contains(box.x0, box.y0) and frame.contains(box.x1, box.y1) and not _hits(box, paths)
                    and not any(_inset(box, 1.5).overlaps(_inset(t, 1.5)) for t in taken)):
                break
            label.remove()
        else:  # nowhere free: the first place (layout_problems will say so)
            label, box = put(text, xy, color, offsets[0])
        taken.append(box)
        placed.append(label)
    return placed


def _parallel_apart(a, b, renderer):
    """Two texts slanted at the same angle (rotated tick labels) whose axis-aligned boxes
    overlap but whose slanted rectangles do not: their centres are more than a line apart
    across the slant, or more than half their lengths apart along it."""
    if a is None or b is None or a.get_rotation() != b.get_rotation() or a.get_rotation() % 90 == 0:
        return False
    angle = np.deg2rad(a.get_rotation())
    along, across = np.array([np.cos(angle), np.sin(angle)]), np.array([-np.sin(angle), np.cos(angle)])
    ca, cb = (np.array(t.get_window_extent(renderer).get_points()).mean(0) for t in (a, b))
    widths, heights = zip(*(renderer.get_text_width_height_descent(t.get_text(), t.get_fontproperties(), False)[:2]
                            for t in (a, b)))
    return abs((cb - ca) @ across) > max(heights) or abs((cb - ca) @ along) > sum(widths) / 2
