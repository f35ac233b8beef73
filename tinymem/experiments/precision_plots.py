"""The drawing of the mixed-precision figures, from the records of ``precision.run`` alone."""
import numpy as np

from .. import plots
from ..techniques import precision

FP16_MARKS = [(np.log2(precision.FP16_MIN_SUBNORMAL), "smallest subnormal\n5.96e-8"),
              (np.log2(precision.FP16_MIN_NORMAL), "smallest normal\n6.10e-5"), (np.log2(precision.FP16_MAX), "max\n65504")]
SOURCE_COLORS = {"between modules": "#c44e52", "parameters": "#4c72b0"}
MODE_COLORS = {"fp32": "#4c72b0", "fp16, no scaling": "#c44e52", "fp16, static scale 1024": "#dd8452",
               "fp16, dynamic scaling": "#55a868", "bf16": "#8172b3"}


def plot(records, outdir, names):
    return [_histogram(records, outdir, names[0]), _training(records, outdir, names[1]),
            _memory(records, outdir, names[2]), _scale(records, outdir, names[3])]


def _histogram(records, outdir, name):
    fig, axes = plots.new_figure(ncols=2, width=5.2, height=4.4)
    bins = np.array(records["bins"])
    centers = (bins[:-1] + bins[1:]) / 2
    top = max(max(np.array(h["counts"]) / max(h["total"], 1)) for h in records["histogram"].values())
    for ax, (shift, title) in zip(axes, ((0, "as computed (unscaled)"), (16, "scaled by the loss scale 2^16"))):
        spans = [ax.axvspan(-45, FP16_MARKS[0][0] - 1, color="#dddddd", label="becomes 0 in fp16"),
                 ax.axvspan(FP16_MARKS[0][0] - 1, FP16_MARKS[1][0], color="#f3e3c3", label="fp16 subnormal (fewer bits)"),
                 ax.axvspan(FP16_MARKS[2][0], 20, color="#f2c4c4", label="becomes inf in fp16")]
        for s in spans:
            s.set_gid(plots.BACKGROUND)
        for source, h in records["histogram"].items():
            counts = np.array(h["counts"]) / max(h["total"], 1)
            rep = h["scaled" if shift else "unscaled"]
            ax.step(centers + shift, counts, where="mid", color=SOURCE_COLORS[source], lw=1.4,
                    label=f"{source}: {100 * rep['underflow']:.1f}% -> 0, {100 * rep['overflow']:.2f}% -> inf")
        for pos, text in FP16_MARKS:
            ax.axvline(pos, color="k", lw=0.6, ls="--").set_gid(plots.BACKGROUND)
            right = text.startswith("smallest normal")  # the two left marks' names face away from each other
            ax.text(pos + (0.5 if right else -0.5), top * 1.08, text, fontsize=plots.MIN_FONT, va="bottom",
                    ha="left" if right else "right")
        ax.set_xlim(-45, 20)
        ax.set_ylim(0, top * 2.9)  # the band above the peaks holds the marks' names and the legend
        ax.set_xlabel("log2 |gradient|")
        ax.set_ylabel("fraction of values per bin")
        ax.set_title(title)
        ax.legend(loc="upper left", ncols=1)
    fig.suptitle("Gradients of the fp32 regression run against float16's range")
    note = ("What to see: the gradients of this small-loss task sit below fp16's smallest subnormal, so stored in fp16 "
            "they become 0; multiplied by 2^16 (the loss scale) the whole histogram moves into range and nothing "
            "overflows.")
    return plots.save(fig, records, outdir, name, note=note)


def _training(records, outdir, name):
    fig, (ax, bx) = plots.new_figure(ncols=2, width=5.2, height=4.2)
    for label, r in records["training"].items():
        loss = np.array(r["loss"])
        smooth = np.convolve(loss, np.ones(10) / 10, mode="valid")
        scaled = label in ("fp16, dynamic scaling", "bf16", "fp16, static scale 1024")
        ax.plot(np.arange(len(smooth)) + 9, smooth, label=label, color=MODE_COLORS.get(label),
                lw=6 if label == "fp32" else 1.6, alpha=0.35 if label == "fp32" else 1.0,
                ls=(0, (2, 2)) if scaled else "-", zorder=1 if label == "fp32" else 2)
    ax.set_yscale("log")
    lows = [min(r["loss"]) for r in records["training"].values()]
    highs = [max(r["loss"]) for r in records["training"].values()]
    ax.set_ylim(min(lows) / 30, max(highs) * 1.5)  # room below the curves for the legend
    ax.set_xlabel("step")
    ax.set_ylabel(f"MSE / unit^2 (unit = {records['config']['unit']:g}), 10-step mean")
    ax.set_title("a loss in small units (gradients ~1e-8)")
    ax.legend(loc="lower left", title="dashed: scaled fp16 and bf16, on fp32's line")
    labels = list(records["accuracy"])
    for i, k in enumerate(labels):
        values = records["accuracy"][k]
        ax_color = MODE_COLORS.get(k, "k")
        bx.plot([i] * len(values), values, "o", color=ax_color, alpha=0.5, ms=6)
        bx.plot([i - 0.25, i + 0.25], [np.mean(values)] * 2, color=ax_color, lw=2.5)
        bx.annotate(f"{np.mean(values):.2f}%", (i + 0.28, np.mean(values)), va="center", fontsize=plots.MIN_FONT + 1)
    every = [v for k in labels for v in records["accuracy"][k]]
    bx.set_xticks(range(len(labels)), [k.replace(", ", "\n") for k in labels])
    bx.set_xlim(-0.5, len(labels) - 0.2)
    bx.set_ylim(min(every) - 0.6, max(every) + 0.6)
    bx.set_ylabel("digits test accuracy (%), zoomed")
    bx.set_title(f"digits: mean (bar) of {records['config']['digits_seeds']} seeds (dots)")
    note = ("What to see: fp16 without scaling stalls (its gradients round to 0), while a static or dynamic loss scale "
            "and bf16 follow fp32 step for step; on digits the three reach the same accuracy.")
    return plots.save(fig, records, outdir, name, note=note)


def _memory(records, outdir, name):
    from ..memory import BUCKETS
    fig, (ax, bx) = plots.new_figure(ncols=2, width=5.2, height=4.4)
    modes = list(records["memory"])
    xs = np.arange(len(modes))
    bottom = np.zeros(len(modes))
    for bucket in BUCKETS:
        vals = np.array([records["memory"][m]["peak_by_bucket"][bucket] / 2**20 for m in modes])
        ax.bar(xs, vals, bottom=bottom, color=plots.BUCKET_COLORS[bucket], label=bucket, width=0.5)
        bottom += vals
    base = records["memory"]["float32"]
    for i, m in enumerate(modes):
        r = records["memory"][m]
        ax.plot(i + 0.35, r["measured_peak"] / 2**20, "kD", ms=6, label="allocator (tracemalloc)" if i == 0 else None)
        ax.text(i, max(bottom[i], r["measured_peak"] / 2**20) * 1.04,
                f"{r['ledger_peak'] / 2**20:.1f} MiB ledger\n{r['measured_peak'] / 2**20:.1f} MiB allocator\n"
                f"({r['measured_peak'] / base['measured_peak']:.2f}x)", ha="center", fontsize=plots.MIN_FONT)
    w, d, b = records["config"]["memory_sizes"]
    ax.set_xticks(xs, modes)
    ax.set_ylabel(f"peak {plots.device_label(records)} memory (MiB)")
    top = max(bottom.max(), max(records["memory"][m]["measured_peak"] / 2**20 for m in modes))
    ax.set_ylim(0, top * 1.5)
    ax.set_title(f"one Adam step, MLP {d} x (Linear {w}, LayerNorm, GELU), batch {b}")
    ax.legend(loc="upper right")
    # the persistent state, invisible beside the activations: per parameter, with the masters apart
    n = base["params"]
    parts = {"parameter": [], "gradient": [], "fp32 masters": [], "Adam state": []}
    for m in modes:
        r = records["memory"][m]["peak_by_bucket"]
        masters = 4 * n if m != "float32" else 0
        parts["parameter"].append(r["parameter"] / n)
        parts["gradient"].append(r["gradient"] / n)
        parts["fp32 masters"].append(masters / n)
        parts["Adam state"].append((r["optimizer"] - masters) / n)
    colors = {"parameter": plots.BUCKET_COLORS["parameter"], "gradient": plots.BUCKET_COLORS["gradient"],
              "fp32 masters": "#a5d6a7", "Adam state": plots.BUCKET_COLORS["optimizer"]}
    bottom = np.zeros(len(modes))
    for part, vals in parts.items():
        bx.bar(xs, vals, bottom=bottom, color=colors[part], width=0.5, label=part,
               hatch="//" if part == "fp32 masters" else None, edgecolor="white")
        bottom += np.array(vals)
    for i in xs:
        bx.text(i, bottom[i] + 0.3, f"{bottom[i]:.1f} B", ha="center", fontsize=plots.MIN_FONT)
    bx.set_xticks(xs, modes)
    bx.set_ylim(0, bottom.max() * 1.6)
    bx.set_ylabel("bytes per parameter at the peak")
    bx.set_title(f"the same peak, weights' share only ({n:,} parameters)")
    bx.legend(loc="upper left", ncols=2)
    note = ("What to see: half precision halves the saved activations, which are almost all of this model's memory; the "
            "fp32 master weights it adds (4 bytes per parameter, right) are real but small next to them.")
    return plots.save(fig, records, outdir, name, note=note)


def _scale(records, outdir, name):
    fig, ax = plots.new_figure(width=7.5, height=4.0)
    r = records["scale_run"]
    ax.step(range(len(r["scale"])), r["scale"], where="post", color="#4c72b0", label="loss scale")
    ax.plot(r["skipped"], [r["scale"][s] for s in r["skipped"]], "rx", ms=8, mew=2,
            label=f"skipped step: inf/nan in the gradients ({len(r['skipped'])})")
    ax.set_yscale("log", base=2)
    ax.set_ylim(min(r["scale"]) / 4, max(r["scale"]) * 16)
    ax.set_xlabel("step")
    ax.set_ylabel("loss scale (log2)")
    ax.set_title(f"dynamic loss scale, fp16 MLP on digits (growth_interval=20, backoff 0.5): "
                 f"test accuracy {r['accuracy']:.1f}%")
    ax.legend(loc="upper left")
    note = ("What to see: the scale doubles after every 20 clean steps until the gradients overflow; that step is "
            "skipped and the scale halves, so it hovers just below the largest value that fits.")
    return plots.save(fig, records, outdir, name, note=note)
