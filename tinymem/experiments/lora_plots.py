"""The lora family's three figures, drawn from its records alone, and the lookups into them."""
from .. import plots
from ..memory import BUCKETS

MIB = 2.0 ** 20
COLORS = {"full": "#c44e52", "LoRA": "#4c72b0", "QLoRA": "#55a868", "pretrained": "#8c8c8c"}
# LoRA and QLoRA at one rank train the same parameters to nearly the same loss: QLoRA's point is
# a large hollow diamond under LoRA's filled circle, its curve dashed on top of LoRA's solid one,
# so that each shows through the other.
MARKERS = {"full": dict(marker="s", markersize=8),
           "LoRA": dict(marker="o", markersize=7, zorder=5),
           "QLoRA": dict(marker="D", markersize=15, mfc="none", mew=2, zorder=4)}
LINES = {"QLoRA": dict(ls="--", lw=2, zorder=4)}


def label(method, r):
    return method if r is None else f"{method} r={r}"


def run_of(records, method, rank=None):
    """The fine-tuning run of ``method`` at rank ``rank`` (None: full, or the pretrained model)."""
    return next(x for x in records["finetune"] if x["method"] == method and x["r"] == rank)


def step_of(records, method, rank=None):
    """The measured training step of ``method`` at rank ``rank``."""
    return next(x for x in records["memory"] if x["method"] == method and x["r"] == rank)


def _memory(records, outdir, name):
    fig, ax = plots.new_figure(width=7.6, height=4.4)
    steps = records["memory"]
    names = [label(s["method"], s["r"]) for s in steps]
    xs = range(len(steps))
    bottom = [0.0] * len(steps)
    for bucket in BUCKETS:
        heights = [s["peak_by_bucket"][bucket] / MIB for s in steps]
        ax.bar(xs, heights, 0.6, bottom=bottom, color=plots.BUCKET_COLORS[bucket], label=bucket)
        bottom = [b + h for b, h in zip(bottom, heights)]
    allocator = [(s["start"] + s["measured_peak"]) / MIB for s in steps]
    # one short line over each bar (a "_" marker 30 points wide ran into its legend label)
    ax.hlines(allocator, [x - 0.32 for x in xs], [x + 0.32 for x in xs], colors="k", lw=2,
              label="allocator (entry + measured growth)")
    ax.set_xticks(list(xs), names)
    ax.set_ylabel(f"{plots.device_label(records)} memory at the peak (MiB)")
    ax.set_ylim(0, max(bottom + allocator) * 1.12)
    cfg = records["config"]
    m = cfg["memory_model"]
    full, qlora = step_of(records, "full"), step_of(records, "QLoRA", 8)
    ax.set_title(f"One Adam step, TransformerLM d={m['d_model']}, {m['n_layers']} blocks, batch "
                 f"{cfg['memory_batch']} x {cfg['memory_context']}\nQLoRA's peak {qlora['peak'] / full['peak']:.2f}x "
                 f"full fine-tuning's; its weights {qlora['peak_by_bucket']['parameter'] / full['peak_by_bucket']['parameter']:.2f}x")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), reverse=True)
    return plots.save(fig, records, outdir, name,
                      note="What to see: LoRA drops the frozen weights' gradient and optimizer state (orange, "
                           "green nearly vanish); QLoRA also shrinks the weights (blue) to NF4. The activations "
                           "still flow through every frozen layer, so they stay.")


def _quality(records, outdir, name):
    fig, (ax_pts, ax_curve) = plots.new_figure(ncols=2, width=5.0, height=4.2)
    runs = [x for x in records["finetune"] if x["method"] != "pretrained"]
    before = run_of(records, "pretrained")["val_loss"]
    for x in runs:
        ax_pts.plot(x["trainable"], x["val_loss"], ls="none", color=COLORS[x["method"]], **MARKERS[x["method"]])
        curve = x["curve"]
        ax_curve.plot([c["step"] for c in curve], [c["val_loss"] for c in curve], color=COLORS[x["method"]],
                      alpha=0.5 + 0.03 * (x["r"] or 16), label=label(x["method"], x["r"]),
                      **LINES.get(x["method"], {}))
    ax_pts.axhline(before, color=COLORS["pretrained"], ls="--").set_gid(plots.BACKGROUND)
    plots.label_points(ax_pts, [(label(x["method"], x["r"]), (x["trainable"], x["val_loss"]), COLORS[x["method"]])
                                for x in runs] + [("before fine-tuning", (runs[0]["trainable"], before), "#555555")])
    ax_pts.set_xscale("log")
    ax_pts.set_xlabel("trainable parameters")
    ax_pts.set_ylabel("validation loss on the new text (nats/char)")
    full, lora8, qlora8 = run_of(records, "full"), run_of(records, "LoRA", 8), run_of(records, "QLoRA", 8)
    ax_pts.set_title(f"LoRA r=8 / full = {lora8['val_loss'] / full['val_loss']:.3f}\n"
                     f"QLoRA r=8 / LoRA r=8 = {qlora8['val_loss'] / lora8['val_loss']:.3f}")
    ax_pts.margins(x=0.25, y=0.15)
    ax_curve.set_xlabel("fine-tuning step")
    ax_curve.set_ylabel("validation loss (nats/char)")
    cfg = records["config"]
    ax_curve.set_title(f"pretrained {cfg['pretrain_steps']} steps on the docs,\nfine-tuned "
                       f"{cfg['finetune_steps']} on stdlib source")
    ax_curve.legend(loc="upper right")
    return plots.save(fig, records, outdir, name,
                      note="What to see: a few thousand trainable parameters get most of the way that "
                           "full fine-tuning's every weight gets; QLoRA's NF4 base costs little on top.")


def _formats(records, outdir, name):
    fig, ax = plots.new_figure(width=6.8, height=4.0)
    per = records["formats"]["bytes_per_weight"]
    names = list(per)
    bars = ax.bar(range(len(names)), [per[k] for k in names], 0.6, color="#4c72b0")
    for bar, k in zip(bars, names):
        ax.text(bar.get_x() + bar.get_width() / 2, bar.get_height(), f"{per[k]:.4g} B\n{8 * per[k]:.3f} bits",
                ha="center", va="bottom", fontsize=plots.MIN_FONT)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylim(0, 4.9)
    ax.set_ylabel("bytes per weight (stored arrays)")
    shape = records["formats"]["shape"]
    ax.set_title(f"A frozen {shape[0]} x {shape[1]} weight, five ways\nscales and codes included")
    return plots.save(fig, records, outdir, name,
                      note=f"What to see: NF4 stores 4 bits per weight plus a float32 scale per 64 "
                           f"({8 * per['NF4']:.3f} bits); double quantization brings the scales to 8 bits per 64 "
                           f"weights ({8 * per['NF4 + double quant.']:.3f} bits).")


def draw(records, outdir, names):
    return [_memory(records, outdir, names[0]), _quality(records, outdir, names[1]),
            _formats(records, outdir, names[2])]
