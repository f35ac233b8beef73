"""Figure: stacking the techniques, a waterfall of the bytes each one removes and the time it adds.

One MLP that is mostly activations at its batch size. Stage by stage (``planner.stack.stages``):
fp32 + Adam, + Adam8bit, + checkpoint (sqrt), + k micro-batches, + optimizer state on the host.
Each stage's peak is the ledger's (split by bucket) and the allocator's growth is recorded beside
it; the step times are taken in turns in one run on one BLAS thread, as CPU time (other jobs on
a shared machine do not count), median and interquartile range. Then the
demonstration that stacking is what makes a model fit: under a budget of a quarter of the
fp32 + Adam need, the plain run raises OutOfMemoryError and the stacked run runs (its losses
are recorded).
"""
import math
import time

from matplotlib.patches import Patch

from .. import memory, plots
from ..measure.claims import IN_TURNS, SLOWER_SHARE, Claim, slower_in_turns
from ..measure.timing import one_blas_thread, paired_turns
from ..memory import BUCKETS
from ..planner import workload
from ..planner.measured.stack import stages, train_under, waterfall

NAME = "stack"
ORDER = 90
FIGURES = ["stack_waterfall.png"]


def run(quick=False, device=None):
    if quick:
        sizes, batch, k = [32] + [64] * 8 + [10], 1024, 16
    else:
        sizes, batch, k = [64] + [128] * 12 + [10], 2048, 16
    work = workload("mlp", sizes, device)
    with one_blas_thread():  # a second BLAS thread waits for a core at random on a shared machine
        records = waterfall(work, batch, micro_batches=k, repeats=5 if quick else 15, clock=time.process_time)
    need = records[0]["ledger"]
    budget = math.ceil(need / 4)
    plain, stacked = stages(k)[0][1], stages(k)[-1][1]
    try:
        train_under(work, plain, batch, budget, steps=1)
        plain_error = None
    except memory.OutOfMemoryError as exc:
        plain_error = str(exc).splitlines()[0]
    losses = train_under(work, stacked, batch, budget, steps=5)
    checkpoint = next(s for s in records if s["combo"]["checkpoint"] != "none")
    return {"config": {"model": "mlp", "sizes": sizes, "batch": batch, "micro_batches": k},
            "stages": records, "budget": budget, "fp32_adam_need": need,
            "stacked_peak": records[-1]["ledger"], "reduction": need / records[-1]["ledger"],
            "plain_under_budget": plain_error, "stacked_losses": losses,
            # the gradient flowing back between two layers is one B x W float array
            "checkpoint_workspace_in_gradient_arrays":
                checkpoint["by_bucket"]["workspace"] / (4 * batch * max(sizes[1:-1]))}


def _each_stage_lowers(r):
    peaks = [s["ledger"] for s in r["stages"]]
    worst = max(b / a for a, b in zip(peaks, peaks[1:]))
    return worst, worst < 1


CLAIMS = [
    Claim("stacked_reduction", "all five stages together need at most a quarter of fp32 + Adam's peak",
          lambda r: (r["reduction"], r["reduction"] >= 4)),
    Claim("each_stage_lowers", "each stage lowers the peak (largest ratio of a stage to the one before < 1)",
          _each_stage_lowers, modes=("full",)),  # the quick model's Adam state (255 KB) is under 8-bit
    # Adam's fixed maps (258 KiB): there the Adam8bit stage raises the peak, as lesson 05 explains
    Claim("plain_fails_under_budget", "under a budget of 1/4 of its need the plain run raises OutOfMemoryError",
          lambda r: (r["plain_under_budget"] is not None, r["plain_under_budget"] is not None)),
    Claim("stacked_trains", "under that budget the stacked run runs, and its loss falls at every one of 5 steps",
          lambda r: (r["stacked_losses"][-1] - r["stacked_losses"][0],
                     all(b < a for a, b in zip(r["stacked_losses"], r["stacked_losses"][1:])))),
    Claim("stacked_costs_time", f"all stacked, the step is slower than fp32 + Adam, {IN_TURNS}",
          lambda r: slower_in_turns(r["stages"][-1]["samples"], r["stages"][0]["samples"]), modes=("full",)),
]


def plot(records, outdir):
    stages_ = records["stages"]
    mib = 2.0 ** 20
    fig, (ax, axt) = plots.new_figure(ncols=2, width=5.8, height=4.8)
    labels = [s["label"] for s in stages_]
    xs = list(range(len(stages_)))
    top = max(s["ledger"] for s in stages_) / mib
    for i, s in enumerate(stages_):
        bottom = 0.0
        for b in BUCKETS:
            height = s["by_bucket"][b] / mib
            ax.bar(i, height, bottom=bottom, color=plots.BUCKET_COLORS[b], width=0.6)
            bottom += height
        if i:
            previous = stages_[i - 1]["ledger"] / mib
            removed = previous - bottom
            ax.bar(i, removed, bottom=bottom, width=0.6, fill=False, hatch="//",
                   edgecolor="#2ca02c" if removed >= 0 else "#d62728", linewidth=0.8)
            ax.text(i, max(previous, bottom) + 0.02 * top, f"{'-' if removed >= 0 else '+'}{abs(removed):.1f}",
                    ha="center", va="bottom", fontsize=plots.MIN_FONT,
                    bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.5})
    budget = ax.axhline(records["budget"] / mib, color="k", ls="--", lw=0.8)
    budget.set_gid(plots.BACKGROUND)
    handles = [Patch(color=plots.BUCKET_COLORS[b], label=b) for b in reversed(BUCKETS)]
    handles += [Patch(fill=False, hatch="//", edgecolor="#2ca02c", label="removed by the stage (MiB)"), budget]
    budget.set_label("budget: 1/4 of fp32 + Adam")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_ylim(0, top * 1.12)
    ax.set_xticks(xs)
    ax.set_xticklabels(labels, rotation=30, ha="right")
    ax.set_ylabel(f"peak {plots.device_label(records)} memory (MiB)")
    cfg = records["config"]
    ax.set_title(f"MLP {len(cfg['sizes']) - 1} layers, batch {cfg['batch']}: {records['reduction']:.1f}x less")
    stats = plots.timing_bars(axt, xs, [s["samples"] for s in stages_], 0.6, "#4c72b0")
    for i in xs[1:]:
        turns = paired_turns(stages_[i]["samples"], stages_[i - 1]["samples"])
        apart = max(turns["share"], 1 - turns["share"]) >= SLOWER_SHARE
        axt.text(i, stats[i]["q3"] * 1e3 * 1.03, f"{turns['q1_ratio'] - 1:+.0%}", ha="center", va="bottom",
                 fontsize=plots.MIN_FONT, color="k" if apart else "#999999", style="normal" if apart else "italic")
    axt.set_ylim(0, max(s["q3"] for s in stats) * 1e3 * 1.15)
    axt.set_xticks(xs)
    axt.set_xticklabels(labels, rotation=30, ha="right")
    axt.set_ylabel("step CPU time (ms), median and IQR")
    whole = paired_turns(stages_[-1]["samples"], stages_[0]["samples"])
    axt.set_title(f"time each stage adds (lower quartiles of {whole['turns']} turns,\n1 BLAS thread; all stacked "
                  f"{whole['q1_ratio']:.1f}x, slower in {whole['slower']} turns)")
    ck = records["checkpoint_workspace_in_gradient_arrays"]
    note = (f"What to see: each stage removes the hatched bytes; checkpointing moves the peak into backward, where "
            f"the gradients flowing back between layers are live (workspace = {ck:.1f} arrays of batch x width "
            f"floats); a time change in grey italics is one that neither side showed in {SLOWER_SHARE:.0%} of the "
            f"paired turns (noise).")
    return [plots.save(fig, records, outdir, FIGURES[0], note=note)]
