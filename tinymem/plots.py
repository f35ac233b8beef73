"""Shared plotting helpers: records -> matplotlib figures, on the Agg backend (no display).

Every family draws its own figures in its experiment module with these helpers, so all the
figures share one look, carry the machine they were measured on, and are saved the same way.
"""
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from .memory import BUCKETS  # noqa: E402

BUCKET_COLORS = {"parameter": "#4c72b0", "gradient": "#dd8452", "optimizer": "#55a868",
                 "activation": "#c44e52", "workspace": "#8c8c8c"}


def new_figure(ncols=1, nrows=1, width=6.4, height=4.2):
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes.ravel() if nrows * ncols > 1 else axes[0, 0]


def stamp(fig, records):
    """Write the machine and date under the figure, so a reader knows where numbers come from."""
    meta = records.get("meta", {})
    text = f"{meta.get('machine', '?')} · {meta.get('device', 'cpu')} · tinymem {meta.get('tinymem', '?')} · {meta.get('date', '')}"
    if meta.get("quick"):
        text += " · QUICK MODE (small sizes)"
    fig.text(0.01, 0.005, text, fontsize=6, color="#666666")


def save(fig, records, outdir, name):
    """Stamp, lay out and write ``outdir/name``; returns the path."""
    stamp(fig, records)
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    os.makedirs(outdir, exist_ok=True)
    path = os.path.join(outdir, name)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def stacked_timeline(ax, timeline, title=None):
    """Device bytes per bucket over the events of a step, stacked, with phase markers."""
    xs = [e["t"] * 1e3 for e in timeline if e["kind"] != "mark"]
    layers = [[e["live"][b] / 2**20 for e in timeline if e["kind"] != "mark"] for b in BUCKETS]
    ax.stackplot(xs, layers, labels=BUCKETS, colors=[BUCKET_COLORS[b] for b in BUCKETS],
                 step="post", alpha=0.9)
    top = max((sum(col) for col in zip(*layers)), default=1.0)
    for e in timeline:
        if e["kind"] == "mark":
            ax.axvline(e["t"] * 1e3, color="k", lw=0.8, ls="--")
            ax.text(e["t"] * 1e3, top * 1.02, e["label"], fontsize=7, rotation=0)
    ax.set_xlabel("time in the step (ms)")
    ax.set_ylabel("device memory (MiB)")
    ax.legend(loc="center left", fontsize=7)
    if title:
        ax.set_title(title)
