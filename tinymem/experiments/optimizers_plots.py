"""The drawing of the optimizer figures, from the records of ``optimizers.run`` alone."""
import matplotlib
import numpy as np

from .. import plots
from ..memory import BUCKETS

STYLES = ["-", "--", ":", "-."]


def plot(records, outdir, names, labels, grids, diverged):
    colors = {label: matplotlib.colormaps["tab20"](k % 20) for k, label in enumerate(labels)}
    return [_state_bytes(records, outdir, names[0]), _training(records, outdir, names[1], colors, grids, diverged),
            _breakdown(records, outdir, names[2]), _pareto(records, outdir, names[3], colors, diverged)]


def _model(records):
    return f"MLP {records['config']['sizes']}"


def _state_bytes(records, outdir, name):
    mem = records["memory"]
    fig, ax = plots.new_figure(width=8, height=4.6)
    labels = [m["label"] for m in mem]
    per_param = [m["ledger_optimizer_bytes"] / m["num_parameters"] for m in mem]
    formula = [m["formula_bytes"] / m["num_parameters"] for m in mem]
    ax.barh(labels, per_param, color=plots.BUCKET_COLORS["optimizer"], label="ledger")
    ax.scatter(formula, labels, marker="|", s=300, color="k", label="formula (optim/table.py)", zorder=3)
    for y, v in enumerate(per_param):
        ax.text(v + 0.15, y, f"{v:.3g}", va="center", fontsize=plots.MIN_FONT)
    ax.invert_yaxis()
    ax.set_xlim(0, max(per_param) * 1.25)
    ax.set_xlabel("optimizer state, bytes per parameter (float32 parameters)")
    ax.set_title(f"Optimizer state after one step, {_model(records)}")
    ax.legend(loc="lower right")
    note = ("What to see: the state ranges from nothing (SGD) through one buffer (4 B) and Adam's two (8 B) to 12 B "
            "with amsgrad or a centered RMSprop; factored (Adafactor), 8-bit and low-rank (GaLore) state cost a "
            "fraction of Adam's. The ledger's bytes equal the formula's.")
    return plots.save(fig, records, outdir, name, note=note)


def _chosen(records):
    out = []
    for label, tuned in records["tuned"].items():
        out += [r for r in records["runs"] if r["label"] == label and r["lr"] == tuned["lr"]][:1]
    return out


def _values(values, cap):
    return np.array([cap if v is None else min(v, cap) for v in values], dtype=float)


def _training(records, outdir, name, colors, grids, cap):
    cfg = records["config"]
    fig, axes = plots.new_figure(ncols=2, nrows=2, width=5.4, height=3.8)
    chosen = _chosen(records)
    for k, r in enumerate(chosen):
        style = {"color": colors[r["label"]], "ls": STYLES[k % len(STYLES)], "lw": 2.2 if k % 2 else 1.3}
        failed = r["final_heldout"] is None or r["final_heldout"] > cap
        train = np.array([np.nan if v is None else v for v in r["train_loss"]])
        window = max(1, len(train) // (4 * cfg["epochs"]))
        smooth = np.convolve(train, np.ones(window) / window, mode="valid")
        axes[0].plot(smooth, **style, label=f"{r['label']} (lr {r['lr']:g})" + (": DIVERGED" if failed else ""))
        heldout = _values(r["heldout_loss"], cap)
        axes[1].plot(range(1, len(heldout) + 1), heldout, marker=".", **style)
        if failed:  # a diverged run ends at the cap with a cross, on both panels
            axes[0].plot([max(len(smooth) - 1, 0)], [cap], "x", color=colors[r["label"]], ms=10, mew=2)
            axes[1].plot([len(heldout)], [cap], "x", color=colors[r["label"]], ms=10, mew=2)
    any_failed = any(r["final_heldout"] is None or r["final_heldout"] > cap for r in chosen)
    top = cap * 1.5 if any_failed else max(max(_values(r["train_loss"], cap)) for r in chosen) * 1.3
    axes[0].set(xlabel="step", ylabel="train loss (moving average)", yscale="log", ylim=(None, top),
                title="train loss, each at its tuned lr")
    axes[1].set(xlabel="epoch", ylabel="held-out loss", yscale="log", ylim=(None, top),
                title="held-out loss (8-bit: Adam's lr)")
    for label, grid in grids.items():
        sweep = sorted((r["lr"], r["final_heldout"]) for r in records["runs"] if r["label"] == label)
        lrs, losses = [lr for lr, _ in sweep], _values([v for _, v in sweep], cap)
        axes[2].plot(lrs, losses, marker="o", ms=4, lw=1, color=colors[label])
        axes[2].plot([lr for lr, v in zip(lrs, losses) if v >= cap], [cap] * int((losses >= cap).sum()), "x",
                     color=colors[label], ms=9, mew=2)
    axes[2].axhline(cap, color="#c44e52", lw=0.8, ls="--").set_gid(plots.BACKGROUND)
    axes[2].text(0.02, 0.93, f"x: diverged (drawn at {cap:g})", transform=axes[2].transAxes, color="#c44e52",
                 fontsize=plots.MIN_FONT, va="top")
    axes[2].set(xscale="log", yscale="log", xlabel="learning rate", ylabel="final held-out loss",
                ylim=(None, cap * 3), title=f"the sweep: {cfg['lrs_per_optimizer']} lr each, {cfg['epochs']} epochs")
    handles, labels = axes[0].get_legend_handles_labels()
    axes[3].axis("off")
    axes[3].legend(handles, labels, loc="center", ncols=1, title="optimizer (tuned lr); line styles alternate")
    fig.suptitle(f"Digits, {_model(records)}, batch {cfg['batch']}")
    edge = [label for label, t in records["tuned"].items() if t.get("lr_at_grid_edge")]
    note = ("What to see: tuned, every optimizer learns digits; the lines that coincide (Adam and AdamW at this weight "
            "decay, Adam and 8-bit Adam) are drawn in different dashes. "
            + (f"Best lr at the edge of its grid (not bracketed): {', '.join(edge)}." if edge
               else "Each lr grid brackets its best value."))
    return plots.save(fig, records, outdir, name, note=note)


def _breakdown(records, outdir, name):
    mem = records["memory"]
    fig, ax = plots.new_figure(width=7.0, height=5.2)
    labels = [m["label"] for m in mem]
    ys = np.arange(len(mem))
    left = np.zeros(len(mem))
    for bucket in BUCKETS:
        values = np.array([m["peak_by_bucket"][bucket] / 2**20 for m in mem])
        ax.barh(ys, values, left=left, color=plots.BUCKET_COLORS[bucket], label=f"at the peak: {bucket}", height=0.6)
        left += values
    between = [(4 * m["num_parameters"] + m["state_bytes"]) / 2**20 for m in mem]
    ax.plot(between, ys, "kD", ms=6, label="between steps: weights + state")
    ax.set_yticks(ys, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, left.max() * 1.05)
    ax.set_xlabel(f"{plots.device_label(records)} MiB (ledger)")
    ax.set_title(f"One training step by bucket, {_model(records)}, batch {records['config']['batch']}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    adam = next(m for m in mem if m["label"] == "Adam")
    adam8 = next(m for m in mem if m["label"] == "Adam8bit")
    where = "below" if adam8["peak"] < adam["peak"] else "above"
    note = (f"What to see: the peak is in the update, where the step's temporaries (workspace) join the state. 8-bit "
            f"Adam keeps {adam8['state_bytes'] / adam['state_bytes']:.2f}x Adam's state between steps (diamond), "
            f"maps included; its update dequantizes the moments to fp32 one chunk of 65,536 elements at a time, "
            f"so its peak ({adam8['peak'] / 2**20:.1f} MiB) is {where} Adam's ({adam['peak'] / 2**20:.1f} MiB).")
    return plots.save(fig, records, outdir, name, note=note)


def _spread_labels(ys, gap):
    """Label heights for points at ``ys`` (sorted), pushed apart to at least ``gap``."""
    out = []
    for y in ys:
        out.append(max(y, out[-1] + gap) if out else y)
    shift = (out[-1] - ys[-1]) / 2 if len(ys) > 1 else 0  # centre the column on its points
    return [y - shift for y in out]


def _pareto(records, outdir, name, colors, cap):
    mem = {m["label"]: m for m in records["memory"]}
    fig, ax = plots.new_figure(width=8.5, height=5.0)
    points, failed = [], []
    for label, tuned in records["tuned"].items():
        losses = [v for v in (tuned["final_heldout"], tuned.get("other_data_order_heldout")) if v is not None and v <= cap]
        if len(losses) < (2 if "other_data_order_heldout" in tuned else 1):
            failed.append(label)
            continue
        x = mem[label]["ledger_optimizer_bytes"] / mem[label]["num_parameters"]
        mean = float(np.mean(losses))
        ax.errorbar([x], [mean], yerr=[[mean - min(losses)], [max(losses) - mean]], fmt="o", color=colors[label],
                    ms=7, capsize=3)
        points.append((x, mean, label))
    frontier = [p for p in sorted(points) if p[2] in records.get("frontier", [])]
    if frontier:  # a guide: labels may cross it (they carry a white box)
        ax.step([p[0] for p in frontier] + [max(p[0] for p in points) * 1.1],
                [p[1] for p in frontier] + [frontier[-1][1]], where="post", color="k", lw=1, ls="--",
                label="frontier: nothing has less state and a lower loss")[0].set_gid(plots.BACKGROUND)
    ys = [p[1] for p in points]
    span = (max(ys) - min(ys)) or max(ys)
    ax.set_ylim(0, max(ys) + 0.35 * span)
    ax.set_xlim(-0.6, max(p[0] for p in points) + 3.2)
    # labels in a column right of each group of points with about the same state bytes
    groups = {}
    for x, y, label in sorted(points):
        key = next((k for k in groups if abs(k - x) < 0.5), x)
        groups.setdefault(key, []).append((y, x, label))
    gap = 0.085 * ax.get_ylim()[1]
    for key, members in groups.items():
        members.sort()
        heights = _spread_labels([m[0] for m in members], gap)
        for (y, x, label), h in zip(members, heights):
            ax.annotate(label, (x, y), xytext=(key + 0.55, h), fontsize=plots.MIN_FONT + 1, va="center",
                        arrowprops={"arrowstyle": "-", "color": "#999999", "lw": 0.6},
                        bbox={"facecolor": "white", "edgecolor": "none", "pad": 0.3, "alpha": 0.8})
    ax.set_xlabel("optimizer state, bytes per parameter")
    ax.set_ylabel("final held-out loss at the tuned lr")
    cfg = records["config"]
    ax.set_title(f"Loss against state memory, {_model(records)}, {cfg['epochs']} epochs, {cfg['lrs_per_optimizer']} lr each")
    ax.legend(loc="upper right")
    best = min(points, key=lambda p: p[1])
    sgd = next((p for p in points if p[2] == "SGD"), None)
    noise = [abs(a - b) / ((a + b) / 2) for a, b in ((t["final_heldout"], t.get("other_data_order_heldout"))
                                                    for t in records["tuned"].values()) if a and b]
    note = (f"What to see: given the same tuning budget, the lowest held-out loss is {best[2]}'s"
            + (f"; plain SGD, with no state, is {sgd[1] / best[1]:.2f}x it" if sgd and sgd is not best else "")
            + (f", and a second batch order moves a run's loss by {100 * np.median(noise):.0f}% (median; bars: the two "
               "orders, dot: their mean)" if noise else "")
            + ". On this small task more state does not buy a lower loss; the frontier (dashed) is "
            + ", ".join(records.get("frontier", [])) + "."
            + (f" Diverged, not drawn: {', '.join(failed)}." if failed else ""))
    return plots.save(fig, records, outdir, name, note=note)
