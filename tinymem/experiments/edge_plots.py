"""Drawing the edge family's figures from its records alone (see ``edge.py`` for what they show)."""
import numpy as np

from .. import plots

KB = 1024
PARTS = {"input": "#4c72b0", "output": "#dd8452", "workspace": "#8c8c8c"}


def plot_onnx(records, outdir, name):
    o = records["onnx"]
    if "skipped" in o:
        fig, ax = plots.new_figure(width=6, height=2)
        ax.axis("off")
        ax.text(0.5, 0.5, f"not drawn: {o['skipped']}", ha="center", va="center")
        return plots.save(fig, records, outdir, name)
    fig, axes = plots.new_figure(ncols=3, width=4.2, height=4.4)
    axes[0].get_gridspec().set_width_ratios([0.8, 1, 1.5])  # the latency panel has five groups to name
    fig.set_size_inches(14.5, 4.4)
    sizes = o["file_bytes"]
    axes[0].bar([0, 1], [sizes["fp32"] / KB, sizes["int8"] / KB], color=["#4c72b0", "#55a868"])
    for x, key in enumerate(("fp32", "int8")):
        axes[0].text(x, sizes[key] / KB, f"{sizes[key] / KB:.1f} KiB" + (f"\n{sizes['int8'] / sizes['fp32']:.3f}x"
                     if key == "int8" else ""), ha="center", va="bottom", fontsize=8)
    axes[0].set_xticks([0, 1])
    axes[0].set_xticklabels(["float32", "int8 (QDQ)"])
    axes[0].set_ylabel("ONNX file size (KiB)")
    axes[0].set_title(f"digits MLP {records['config']['sizes']}", fontsize=9)
    # Accuracies that differ by a few hundredths of a point make equal bars: show the change
    # against tinymem's float32 model instead, inside the one point the accuracy claim allows.
    acc = o["accuracy"]
    names = list(acc)
    base = 100 * acc["tinymem fp32"]
    change = [100 * acc[n] - base for n in names]
    axes[1].axhspan(-1, 0, color="#dddddd", label="the 1-point loss the claim allows")
    axes[1].bar(range(len(names)), change, color=["#4c72b0", "#4c72b0", "#55a868", "#55a868"], alpha=0.9)
    for x, (n, d) in enumerate(zip(names, change)):
        axes[1].text(x, max(d, 0) + 0.05, f"{100 * acc[n]:.2f}%\n{d:+.2f}", ha="center", va="bottom", fontsize=8)
    axes[1].axhline(0, color="k", lw=0.8)
    axes[1].set_xticks(range(len(names)))
    axes[1].set_xticklabels([n.replace(" ", "\n") for n in names], fontsize=8)
    reach = max(1.5, 1.4 * max(abs(d) for d in change))
    axes[1].set_ylim(-reach, reach)
    axes[1].legend(loc="lower right")
    axes[1].set_ylabel(f"accuracy change vs tinymem fp32\n(points, {o['test_inputs']} test digits)")
    agree = o["agreement"]
    fused, ref = agree["fused int8 kernels"], agree["reference kernels"]
    axes[1].set_title(f"int8 codes vs tinymem: reference kernels {ref['codes_off_by_one']} of {ref['codes']:,} off;\n"
                      f"fused kernels {fused['codes_off_by_one']} off by one step, {fused['codes_beyond_one_step']} "
                      f"further (int16 pair saturation explains {fused['beyond_explained_by_int16_pairs']}), "
                      f"{fused['predictions_differ']} predictions differ", fontsize=8)
    rows = o["latency"]
    xs = np.arange(len(rows))
    for j, (kind, color) in enumerate((("fp32", "#4c72b0"), ("int8", "#55a868"))):
        med = np.array([r[kind]["median"] for r in rows]) * 1e6
        err = [med - np.array([r[kind]["q25"] for r in rows]) * 1e6, np.array([r[kind]["q75"] for r in rows]) * 1e6 - med]
        axes[2].bar(xs + (j - 0.5) * 0.38, med, 0.38, yerr=err, color=color, capsize=2, label=kind)
    for x, r in zip(xs, rows):  # the speed-up above the taller error bar of the pair
        top = max(r[kind]["q75"] for kind in ("fp32", "int8")) * 1e6
        axes[2].text(x, top * 1.25, f"{r['fp32']['median'] / r['int8']['median']:.1f}x", ha="center", fontsize=8)
    axes[2].set_yscale("log")
    axes[2].set_xticks(xs)
    axes[2].set_xticklabels([f"{r['model']}\nbatch {r['batch']}" for r in rows], fontsize=8)
    axes[2].set_ylim(top=axes[2].get_ylim()[1] * 3)  # room for the last speed-up
    axes[2].set_ylabel("µs per batch (median, 25-75th pct)")
    axes[2].set_title("ONNX Runtime, 1 thread, in turns: speed-up of int8", fontsize=9)
    axes[2].legend(loc="upper left")
    fig.suptitle("Post-training int8 (per-channel weights, histogram-calibrated activations) exported to ONNX, "
                 "run in ONNX Runtime\nwhose fused graph runs " + ", ".join(o["ort_ops"]), fontsize=9)
    return plots.save(fig, records, outdir, name)


def _short(name):
    """'Conv3x3(16->32, s2, relu)' -> 'conv 16->32 /2'."""
    if not name.startswith("Conv"):
        return name.replace("MaxPool", "maxpool ")
    inside = name[name.index("(") + 1:-1].split(", ")
    return f"conv{name[4:name.index('(')]} {inside[0]}" + (" /2" if inside[1] == "s2" else "")


def _best(m):
    return next(c for c in m["configs"] if (c["split"], c["grid"]) == (m["best"]["split"], m["best"]["grid"]))


GRID_MARKERS = ["o", "s", "^", "D", "v", "P", "X"]
# One colour per stage length; none of them red, which the SRAM lines use.
SPLIT_COLORS = ["#4c72b0", "#dd8452", "#55a868", "#8172b3", "#937860", "#64b5cd"]


def _sram_lines(ax):
    ax.axhline(256, color="#c44e52", lw=1.2, label="256 KiB SRAM")
    ax.axhline(1024, color="#c44e52", lw=1, ls=":", label="256 KiB SRAM with int8 activations\n(1 byte, not 4: bars / 4)")


def plot_profile(records, outdir, name):
    mem = records["memory"]
    fig, axes = plots.new_figure(nrows=len(mem), width=15, height=3.9)
    for k, (ax, (net, m)) in enumerate(zip(np.atleast_1d(axes), mem.items())):
        whole, best = m["whole"], _best(m)
        xs = np.arange(len(whole))
        bottom = np.zeros(len(whole))
        for part, color in PARTS.items():
            vals = np.array([r[part] for r in whole]) / KB
            ax.bar(xs - 0.2, vals, 0.4, bottom=bottom, color=color, label=f"layer by layer: {part}")
            bottom += vals
        patch = np.array([r["peak"] for r in best["layers"]]) / KB
        in_stage = np.arange(len(patch)) < best["split"]
        ax.bar(xs[in_stage] + 0.2, patch[in_stage], 0.4, color="#55a868", hatch="//", edgecolor="white",
               label=f"patch-based stage ({best['grid']}x{best['grid']} tiles): peak over tiles")
        ax.bar(xs[~in_stage] + 0.2, patch[~in_stage], 0.4, color="#55a868", label="after the stage: layer by layer")
        _sram_lines(ax)
        ax.set_xticks(xs)
        ax.set_xticklabels([f"{_short(r['name'])}\n{'x'.join(map(str, r['shape'][1:]))}" for r in whole], fontsize=8)
        ax.set_ylabel("activation KiB")
        ratio = m["whole_peak"] / best["peak"]
        ax.set_title(f"{net}, input {'x'.join(map(str, m['input_shape'][1:]))}: peak {m['whole_peak'] / KB:,.0f} KiB "
                     f"layer by layer, {best['peak'] / KB:,.0f} KiB patch-based ({ratio:.1f}x lower)\nfirst "
                     f"{best['split']} layers in tiles, {100 * best['recompute']:.0f}% halo recompute: the lowest peak "
                     f"recomputing at most {100 * records['config'].get('max_recompute', 0.5):.0f}%", fontsize=9)
        if k == 0:  # one legend for both panels, outside on the right (it covers no bar)
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("Inference memory per layer (float32 activations, batch 1, from the ledger; weights stay in flash)",
                 fontsize=9)
    return plots.save(fig, records, outdir, name)


def _finer_tiles_lower(m):
    """Per stage length, how the peak answers finer grids: ``"falls"`` at every step, ``"levels
    off"`` (falls, then stays), or ``"never falls"``; it never rises in the records seen so far."""
    out = {}
    for split in sorted({c["split"] for c in m["configs"]}):
        peaks = [c["peak"] for c in sorted((c for c in m["configs"] if c["split"] == split), key=lambda c: c["grid"])]
        steps = [b - a for a, b in zip(peaks, peaks[1:])]
        out[split] = ("rises" if any(d > 0 for d in steps) else "falls" if all(d < 0 for d in steps)
                      else "never falls" if all(d == 0 for d in steps) else "levels off")
    return out


def plot_tradeoff(records, outdir, name):
    mem = records["memory"]
    fig, axes = plots.new_figure(ncols=len(mem), width=6.4, height=6.2)
    for ax, (net, m) in zip(np.atleast_1d(axes), mem.items()):
        splits = sorted({c["split"] for c in m["configs"]})
        grids = sorted({c["grid"] for c in m["configs"]})
        for k, split in enumerate(splits):  # colour: the stage's length; marker: the tile grid
            color = SPLIT_COLORS[k % len(SPLIT_COLORS)]
            cs = sorted((c for c in m["configs"] if c["split"] == split), key=lambda c: c["grid"])
            ax.plot([100 * c["recompute"] for c in cs], [c["peak"] / KB for c in cs], "-", color=color,
                    label=f"first {split} layers in tiles")
            for c in cs:  # hollow: a marker on top of another leaves it visible
                ax.plot(100 * c["recompute"], c["peak"] / KB, GRID_MARKERS[grids.index(c["grid"]) % len(GRID_MARKERS)],
                        ms=7, mfc="none", mec=color, mew=1.3)
        for g, grid in enumerate(grids):
            ax.plot([], [], GRID_MARKERS[g % len(GRID_MARKERS)], ms=7, mfc="none", mec="k",
                    label=f"{grid}x{grid} tiles")
        ax.axhline(m["whole_peak"] / KB, color="k", ls="--", lw=1, label="layer by layer")
        _sram_lines(ax)
        ax.set_yscale("log")
        ax.set_xlabel("recomputed halo work (% of the stage's multiply-adds)")
        ax.set_ylabel("peak activation KiB (log)")
        kinds = _finer_tiles_lower(m)
        counts = {kind: [str(k) for k, v in kinds.items() if v == kind] for kind in dict.fromkeys(kinds.values())}
        ax.set_title(f"{net}: with finer tiles the peak\n" + "\n".join(
            f"{kind} (first {', '.join(splits)} layers in tiles)" for kind, splits in counts.items()), fontsize=9)
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)  # under the axes: it covers no point
    fig.suptitle("Patch-based inference: finer tiles recompute more halo; each point a stage length (colour) and a "
                 "tile grid (marker)", fontsize=9)
    return plots.save(fig, records, outdir, name)
