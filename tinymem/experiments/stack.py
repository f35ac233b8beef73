"""Figure: stacking the techniques, a waterfall of the bytes each one removes and the time it adds.

One MLP that is mostly activations at its batch size. Stage by stage (``planner.stack.stages``):
fp32 + Adam, + Adam8bit, + checkpoint (sqrt), + k micro-batches, + optimizer state on the host.
Each stage's peak is the ledger's (split by bucket) and the allocator's growth is recorded beside
it; the step times are measured side by side in one run. Then the demonstration that stacking
is what makes a model fit: under a budget of a quarter of the fp32 + Adam need, the plain run raises OutOfMemoryError
and the stacked run trains (its losses are recorded).
"""
import math

from .. import memory, plots
from ..memory import BUCKETS
from ..planner import workload
from ..planner.stack import stages, train_under, waterfall

NAME = "stack"
ORDER = 90
FIGURES = ["stack_waterfall.png"]


def run(quick=False, device="cpu"):
    if quick:
        sizes, batch, k = [32] + [64] * 8 + [10], 1024, 16
    else:
        sizes, batch, k = [64] + [128] * 12 + [10], 2048, 16
    work = workload("mlp", sizes, device)
    records = waterfall(work, batch, micro_batches=k, repeats=2 if quick else 3)
    need = records[0]["ledger"]
    budget = math.ceil(need / 4)
    plain, stacked = stages(k)[0][1], stages(k)[-1][1]
    try:
        train_under(work, plain, batch, budget, steps=1)
        plain_error = None
    except memory.OutOfMemoryError as exc:
        plain_error = str(exc).splitlines()[0]
    losses = train_under(work, stacked, batch, budget, steps=5)
    return {"config": {"model": "mlp", "sizes": sizes, "batch": batch, "micro_batches": k},
            "stages": records, "budget": budget, "fp32_adam_need": need,
            "stacked_peak": records[-1]["ledger"], "reduction": need / records[-1]["ledger"],
            "plain_under_budget": plain_error, "stacked_losses": losses}


def plot(records, outdir):
    stages_ = records["stages"]
    mib = 2.0 ** 20
    fig, (ax, axt) = plots.new_figure(ncols=2, width=6.2, height=4.6)
    labels = [s["label"] for s in stages_]
    xs = range(len(stages_))
    for i, s in enumerate(stages_):
        bottom = 0.0
        for b in BUCKETS:
            height = s["by_bucket"][b] / mib
            ax.bar(i, height, bottom=bottom, color=plots.BUCKET_COLORS[b], width=0.6,
                   label=b if i == 0 else None)
            bottom += height
        if i:
            previous = stages_[i - 1]["ledger"] / mib
            removed = previous - bottom
            ax.bar(i, removed, bottom=bottom, width=0.6, fill=False, hatch="//",
                   edgecolor="#2ca02c" if removed >= 0 else "#d62728", linewidth=0.8)
            ax.text(i, max(previous, bottom) * 1.01, f"{'-' if removed >= 0 else '+'}{abs(removed):.2f}",
                    ha="center", va="bottom", fontsize=7)
    ax.axhline(records["budget"] / mib, color="k", ls="--", lw=0.8)
    ax.text(len(stages_) - 0.5, records["budget"] / mib * 1.02, "budget = 1/4 of fp32 + Adam", ha="right",
            fontsize=7)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=7)
    ax.set_ylabel("peak device memory of a step (MiB, ledger)")
    cfg = records["config"]
    ax.set_title(f"MLP {len(cfg['sizes']) - 1} layers, batch {cfg['batch']}: "
                 f"{records['reduction']:.1f}x less memory", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    base = stages_[0]["seconds"]
    ms = [s["seconds"] * 1e3 for s in stages_]
    axt.bar(list(xs), ms, color="#4c72b0", width=0.6)
    for i, s in enumerate(stages_):
        if i:
            added = s["seconds"] / stages_[i - 1]["seconds"] - 1
            axt.text(i, ms[i] * 1.01, f"{added:+.0%}", ha="center", va="bottom", fontsize=7)
    axt.set_xticks(list(xs))
    axt.set_xticklabels(labels, rotation=25, ha="right", fontsize=7)
    axt.set_ylabel("step time (ms, measured side by side)")
    axt.set_title(f"time each technique adds (all stacked: {stages_[-1]['seconds'] / base:.1f}x)", fontsize=9)
    return [plots.save(fig, records, outdir, FIGURES[0])]
