"""Drawing of the ``torch_conventions`` family: predicted over measured per configuration, and
the measured peak by bucket."""
from .. import plots

STYLES = {"tinymem": ("#4c72b0", "o"), "deepspeed": ("#dd8452", "s"), "zero-paper": ("#55a868", "^"),
          "korthikanti": ("#8172b3", "v"), "torch": ("#c44e52", "D")}
# The measured buckets, bottom to top: what every count has, then what only the torch mode counts.
BUCKETS = {"parameter": ("parameters + buffers", "#4c72b0"), "gradient": ("gradients", "#dd8452"),
           "optimizer": ("AdamW state", "#55a868"), "activation": ("saved for backward + inputs", "#8172b3"),
           "in_flight": ("gradients in flight", "#e377c2"), "temporary": ("temporaries (CE backward, ...)", "#c44e52")}


def measured_buckets(row):
    """The measurement's buckets folded into :data:`BUCKETS` (buffers with the parameters, the
    token ids and targets with what is saved)."""
    b = dict(row["measured"]["buckets"])
    b["parameter"] += b.pop("buffer", 0)
    b["activation"] += b.pop("input", 0)
    return b


def draw(records, outdir, name, ratios):
    rows = records["rows"]
    fig, (ax, axb) = plots.new_figure(ncols=2, width=6.4, height=5.6)
    xs = list(range(len(rows)))
    labels = [f"{r['label']} ({r['parameters'] / 1e6:.2g}M)" for r in rows]
    ax.axvspan(0.99, 1.01, color="#c44e52", alpha=0.3, lw=0, label="within 1% of the measured peak")
    ax.axvline(1.0, color="k", lw=0.6)
    for predictor, values in ratios.items():
        color, marker = STYLES[predictor]
        ax.plot(values, xs, ls="none", marker=marker, ms=5, color=color, label=f"{predictor}")
    ax.set_yticks(xs)
    ax.set_yticklabels(labels, fontsize=plots.MIN_FONT)
    ax.invert_yaxis()
    ax.set_xlabel("predicted peak / measured peak")
    worst = max(abs(x - 1) for x in ratios["torch"])
    ax.set_title(f"five counts against the measured step (torch mode: at most {worst:.2%} off)", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=plots.MIN_FONT, ncol=3, frameon=False)
    left = [0.0] * len(rows)
    for bucket, (label, color) in BUCKETS.items():
        shares = [measured_buckets(r)[bucket] / r["measured"]["peak"] for r in rows]
        axb.barh(xs, shares, left=left, color=color, label=label, height=0.7)
        left = [a + b for a, b in zip(left, shares)]
    axb.set_yticks(xs)
    axb.set_yticklabels([f"{r['measured']['phase']}, {r['measured']['peak'] / 1e6:.3g} MB" for r in rows],
                        fontsize=plots.MIN_FONT)
    axb.invert_yaxis()
    axb.set_xlim(0, 1)
    axb.set_xlabel("share of the measured peak")
    axb.set_title("the measured peak by bucket (phase, peak)", fontsize=9)
    axb.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), fontsize=plots.MIN_FONT, ncol=2, frameon=False)
    cfg = records["config"]
    others = [x for p, values in ratios.items() if p != "torch" for x in values]
    return plots.save(fig, records, outdir, name,
                      note=f"What to see: PyTorch {cfg['precision']} steps with {cfg['optimizer']} on the CPU, the "
                           "peak of the second step measured with the profiler. The counts made for tinymem's engine "
                           f"and the published conventions predict {min(others):.2f} to {max(others):.2f} of it; the "
                           "torch mode, which counts what PyTorch saves and the cross-entropy backward's N x V "
                           "gradients, is the one meant to fall in the 1% band.")
