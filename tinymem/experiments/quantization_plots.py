"""The drawing of the quantization figures, from the records of ``quantization.run`` alone."""
import numpy as np

from .. import plots

KINDS = ("per-tensor", "per-channel")
KIND_COLORS = {"per-tensor": "#4c72b0", "per-channel": "#dd8452"}
CAL_STYLES = [("#c44e52", "-"), ("#dd8452", "--"), ("#55a868", "-."), ("#4c72b0", ":"), ("#8172b3", "-")]


def plot(records, outdir, names, calibrators, outlier):
    return [_calibration(records, outdir, names[0], list(calibrators), outlier),
            _ranges(records, outdir, names[1]), _bits(records, outdir, names[2])]


def _calibration(records, outdir, name, calibrators, outlier):
    cal = records["calibration"]
    fig, axes = plots.new_figure(ncols=2, width=5.0, height=4.4)
    xs = np.arange(len(calibrators))
    for ax, data_name in zip(axes, ("clean", "outliers")):
        for j, kind in enumerate(KINDS):
            acc = [100 * cal["accuracy"][f"{data_name}|{n}|{kind}"] for n in calibrators]
            bars = ax.bar(xs + (j - 0.5) * 0.4, acc, 0.4, color=KIND_COLORS[kind], label=f"int8, {kind} weights")
            for b, a in zip(bars, acc):  # the value inside its bar, near the top (or above a short bar)
                inside = a > 30
                t = ax.text(b.get_x() + b.get_width() / 2, a - 2 if inside else a + 2, f"{a:.1f}", rotation=90,
                            ha="center", va="top" if inside else "bottom", fontsize=plots.MIN_FONT,
                            color="white" if inside else "k")
                t.set_gid(plots.INSIDE if inside else None)
        fp32 = ax.axhline(100 * cal["fp32_accuracy"], color="k", ls="--", lw=1,
                          label=f"fp32 {100 * cal['fp32_accuracy']:.1f} %")
        fp32.set_gid(plots.BACKGROUND)
        ax.set_xticks(xs, calibrators, rotation=25, ha="right")
        ax.set_ylim(0, 128)  # the same range on both panels; the band above 100 holds the legend
        ax.set_yticks(range(0, 101, 20))
        ax.set_ylabel("test accuracy (%)")
        ax.set_title("calibrated on clean data" if data_name == "clean" else f"calibrated on data + 4 outliers (±{outlier:g})")
        ax.legend(loc="upper center", ncols=2)
    pb = records["parameter_bytes"]
    t = cal["inference_seconds"]
    fig.suptitle(f"Post-training int8, digits MLP: weights {pb['fp32_weights']:,} -> {pb['int8_weights']:,} B "
                 f"({pb['fp32_weights'] / pb['int8_weights']:.1f}x less, ledger)")
    note = (f"What to see: with clean data every calibrator matches fp32; 4 outliers stretch the range of min-max and of the "
            f"L2 histogram so far that int8 loses the digits (moving average only dilutes them), while percentile and "
            f"entropy ignore them. Whole model with fp32 bias, scales and "
            f"column sums: {pb['fp32']:,} -> {pb['int8_model']:,} B. Test-set inference takes {t['int8'] / t['fp32']:.1f}x "
            f"fp32's CPU time here (median): NumPy has no int8 kernels, the gain is memory.")
    return plots.save(fig, records, outdir, name, note=note)


def _ranges(records, outdir, name):
    cal = records["calibration"]
    fig, axes = plots.new_figure(nrows=2, width=9.0, height=3.2)
    for ax, data_name in zip(axes, ("clean", "outliers")):
        r = cal["ranges"][data_name]
        ax.stairs(np.maximum(r["counts"], 0.5), np.asarray(r["edges"]), fill=True, color="#bbbbbb",
                  label="input values (histogram)")
        ax.set_yscale("log")
        for k, (cal_name, (lo, hi)) in enumerate(r["calibrators"].items()):
            color, ls = CAL_STYLES[k % len(CAL_STYLES)]
            acc = 100 * cal["accuracy"][f"{data_name}|{cal_name}|per-tensor"]
            ax.axvline(hi, color=color, lw=1.6, ls=ls, label=f"{cal_name}: clips at {hi:.1f}, accuracy {acc:.1f}%")
        ax.set_xlabel("input of the second Linear (after ReLU)")
        ax.set_ylabel("count (log)")
        ax.set_ylim(0.4, max(r["counts"]) * 3)
        ax.set_title(f"calibration on {'clean data' if data_name == 'clean' else 'data + 4 outliers'}: "
                     f"fp32 accuracy {100 * cal['fp32_accuracy']:.1f}%")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle("The range each calibrator chose (lower end 0 after ReLU); int8 accuracy with per-tensor weights")
    note = ("What to see: a good range covers the bulk of the values and clips the rare extremes: on clean data all do; "
            "with 4 outliers min-max and histogram (L2) stretch to them and leave few int8 steps for the bulk, while "
            "percentile and entropy clip lower and keep the accuracy (the legend gives each one's int8 accuracy).")
    return plots.save(fig, records, outdir, name, note=note)


def _bits(records, outdir, name):
    b = records["bits"]
    rows = b["rows"]
    labels = [str(r["bits"]) for r in rows]
    fig, axes = plots.new_figure(ncols=2, nrows=2, width=4.6, height=3.4)
    xs = np.arange(len(rows))
    ax = axes[0]
    ax.bar(xs - 0.2, [r["saved_bytes"] / 2**10 for r in rows], 0.4, label="ledger", color=plots.BUCKET_COLORS["activation"])
    ax.bar(xs + 0.2, [r["measured_after_forward"] / 2**10 for r in rows], 0.4, label="allocator: growth after forward",
           color="#8c8c8c")
    for x, r in zip(xs, rows):
        top = max(r["saved_bytes"], r["measured_after_forward"]) / 2**10
        ax.text(x, top + 8, f"{r['saved_ratio']:.3f}x", ha="center", va="bottom", fontsize=plots.MIN_FONT)
    ax.set_ylim(0, max(max(r["saved_bytes"], r["measured_after_forward"]) for r in rows) / 2**10 * 1.35)
    ax.set_ylabel("KiB")
    ax.set_title("saved activations after forward")
    ax.legend(loc="upper right")
    ax = axes[1]
    acc = [100 * r["accuracy"] for r in rows]
    ax.plot(xs, acc, "o", color="#4c72b0", ms=8)
    for x, a in zip(xs, acc):
        ax.annotate(f"{a:.2f}", (x, a), xytext=(0, 8), textcoords="offset points", ha="center", fontsize=plots.MIN_FONT)
    ax.set_ylim(min(acc) - 1.0, max(acc) + 0.8)
    ax.set_xlim(-0.5, len(rows) - 0.5)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title(f"test accuracy after {b['epochs']} epochs (zoomed)")
    ax = axes[2]
    stats = plots.timing_bars(ax, xs, [r["step_samples"] for r in rows], 0.6, "#8c8c8c")
    for x, r, s in zip(xs, rows, stats):
        ax.text(x, s["q3"] * 1e3 * 1.04, f"{r['step_time_ratio']:.1f}x", ha="center", va="bottom", fontsize=plots.MIN_FONT)
    codec = [r["codec_seconds"] * 1e3 for r in rows]
    ax.bar(xs, codec, 0.6, fill=False, hatch="//", edgecolor="k", lw=0.6, label="pack + unpack of one array")
    ax.set_ylim(0, max(s["q3"] for s in stats) * 1e3 * 1.25)
    ax.set_ylabel("CPU time, ms (median, IQR)")
    ax.set_title("forward + backward (1 BLAS thread)")
    ax.legend(loc="upper left")
    ax = axes[3]
    ax.bar(xs, [r["grad_rel_error"] for r in rows], color="#dd8452")
    for x, r in zip(xs, rows):
        ax.text(x, r["grad_rel_error"] + 0.01, f"{r['grad_rel_error']:.3f}", ha="center", va="bottom", fontsize=plots.MIN_FONT)
    ax.set_ylim(0, max(r["grad_rel_error"] for r in rows) * 1.25 + 0.02)
    ax.set_title("gradient error |g - g32| / |g32|, first step")
    for ax in axes:
        ax.set_xticks(xs, labels)
        ax.set_xlabel("bits per saved activation")
    fig.suptitle(f"Training MLP {b['sizes']} (batch {b['batch']}) with compressed saved activations")
    shape = " x ".join(str(n) for n in b.get("codec_array", []))
    by_bits = {r["bits"]: r for r in rows}
    note = (f"What to see: 8 bits keep {by_bits[8]['saved_ratio']:.2f}x of the saved bytes, 2 bits "
            f"{by_bits[2]['saved_ratio']:.2f}x, with a noisier gradient; accuracy moves by at most "
            f"{max(abs(100 * (r['accuracy'] - by_bits[32]['accuracy'])) for r in rows):.2f} points. Compression costs "
            "time in NumPy, and 4 bits the most: packing two codes per byte loops over an "
            f"axis of length 2, which NumPy runs slower than 2-bit's axis of 4 (hatched: pack + unpack of one {shape} array).")
    return plots.save(fig, records, outdir, name, note=note)
