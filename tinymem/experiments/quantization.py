"""Figures: int8 post-training quantization and compressed saved activations on the digits MLP.

- ``quant_calibration.png``: test accuracy of the int8 model for each calibrator x per-tensor /
  per-channel weights, beside fp32; calibrated on clean data and on the same data with a few
  injected outliers (4 input values of ±1000 in 1,024 samples, a glitching sensor; the data's
  own largest value is about 38).
- ``quant_ranges.png``: the input histogram of the second Linear with each calibrator's range.
- ``quant_activation_bits.png``: training with saved activations at 32, 8, 4, 2 bits: saved
  bytes (ledger and allocator), final accuracy, step time and the error of the first gradient.
"""
import contextlib
import time
import tracemalloc

import numpy as np

from .. import data, memory, models, optim, plots, random
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..measure.timing import interleaved_times
from ..techniques import quantization as Q

NAME = "quantization"
ORDER = 30
FIGURES = ["quant_calibration.png", "quant_ranges.png", "quant_activation_bits.png"]

SIZES = [64, 128, 128, 10]
OUTLIER = 1000.0
CALIBRATORS = {
    "min-max": Q.MinMaxObserver,
    "moving avg": Q.MovingAverageMinMaxObserver,
    "percentile 99.99": Q.PercentileObserver,
    "histogram (L2)": Q.HistogramObserver,
    "entropy (KL)": Q.EntropyObserver,
}


def _one_blas_thread():
    """Time on one BLAS thread: on a shared 2-core machine a second OpenBLAS thread must wait to
    be scheduled after every pause between GEMMs, which penalised the compressed steps (numpy
    work between matmuls) up to 5x at random. threadpoolctl comes with scikit-learn."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)


def _accuracy(model, x, y):
    with no_grad():
        return float((model(Tensor(x)).data.argmax(1) == y).mean())


def _train(sizes, x, y, epochs, batch, bits=32, seed=0):
    random.manual_seed(seed)
    model = models.MLP(sizes)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    loader = data.DataLoader((x, y), batch_size=batch, shuffle=True, seed=seed)
    times = []
    for _ in range(epochs):
        for xb, yb in loader:
            start = time.perf_counter()
            loss = _loss(model, xb, yb, bits)
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - start)
    return model, float(np.median(times))


def _loss(model, x, y, bits):
    if bits == 32:
        return F.cross_entropy(model(x), y)
    with Q.compress_saved_activations(bits):
        return F.cross_entropy(model(x), y)


def _fresh(state, sizes=SIZES):
    model = models.MLP(sizes)
    model.load_state_dict(state)
    return model


def parameter_bytes(state):
    """Ledger ``parameter`` bytes of the fp32 model and of its int8 conversion (weights alone too)."""
    base = memory.live_bytes("parameter")
    model = _fresh(state)
    fp32 = memory.live_bytes("parameter") - base
    fp32_weights = sum(m.weight.nbytes for m in model if hasattr(m, "weight"))
    Q.quantize_model(model, [np.zeros((2, SIZES[0]), np.float32)], Q.MinMaxObserver)
    int8 = memory.live_bytes("parameter") - base
    int8_weights = sum(m.weight.nbytes for m in model if hasattr(m, "weight"))
    return {"fp32": fp32, "int8_model": int8, "fp32_weights": fp32_weights, "int8_weights": int8_weights}


def _calibration_sets(x_train):
    clean = [x_train[i:i + 256].copy() for i in range(0, 1024, 256)]
    rng = np.random.default_rng(0)
    noisy = [b.copy() for b in clean]
    for k in range(4):
        b = noisy[k]
        b[rng.integers(len(b)), rng.integers(b.shape[1])] = OUTLIER * (1 if k % 2 else -1)
    return {"clean": clean, "outliers": noisy}


def _layer_inputs(model, batches, layer=2):
    """The inputs of ``model[layer]`` over the calibration batches (a flat array)."""
    out = []
    with no_grad():
        for b in batches:
            out.append(model[:layer](Tensor(b)).data.ravel())
    return np.concatenate(out)


def run_calibration(state, x_train, x_test, y_test):
    fp32 = _fresh(state)
    records = {"fp32_accuracy": _accuracy(fp32, x_test, y_test), "accuracy": {}, "calibrate_seconds": {},
               "ranges": {}}
    sets = _calibration_sets(x_train)
    for data_name, batches in sets.items():
        for cal, observer in CALIBRATORS.items():
            for per_channel in (False, True):
                start = time.perf_counter()
                model = Q.quantize_model(_fresh(state), batches, observer, per_channel)
                key = f"{data_name}|{cal}|{'per-channel' if per_channel else 'per-tensor'}"
                records["calibrate_seconds"][key] = time.perf_counter() - start
                records["accuracy"][key] = _accuracy(model, x_test, y_test)
        acts = _layer_inputs(fp32, batches)
        counts, edges = np.histogram(acts, bins=120)
        ranges = {}
        for cal, observer in CALIBRATORS.items():
            obs = observer()
            for b in batches:
                with no_grad():
                    obs(fp32[:2](Tensor(b)))
            ranges[cal] = [float(v) for v in obs.observed_range()]
        records["ranges"][data_name] = {"counts": counts.tolist(), "edges": edges.tolist(), "calibrators": ranges}
    int8 = Q.quantize_model(_fresh(state), sets["clean"], Q.HistogramObserver, per_channel=True)
    x = Tensor(x_test)
    with no_grad(), _one_blas_thread():
        records["inference_seconds"] = interleaved_times({"fp32": lambda: fp32(x), "int8": lambda: int8(x)},
                                                         repeats=20)
    return records


def run_bits(x_train, y_train, x_test, y_test, epochs, batch, device):
    sizes = [64, 256, 256, 10]
    random.manual_seed(1)
    state = models.MLP(sizes).state_dict()
    # Copies: a slice is a view, and the ledger (rightly) counts a saved view's whole base array.
    xb, yb = Tensor(x_train[:batch].copy()), Tensor(y_train[:batch].copy())
    rows, ref = [], None
    for bits in (32, 8, 4, 2):
        model = _fresh(state, sizes)
        random.manual_seed(2)
        with memory.track(device=device) as t:
            entry = tracemalloc.get_traced_memory()[0]
            loss = _loss(model, xb, yb, bits)
            saved = memory.live_bytes("activation")
            measured_after_forward = tracemalloc.get_traced_memory()[0] - entry
            loss.backward()
        g = np.concatenate([p.grad.data.ravel() for p in model.parameters()])
        ref = g if ref is None else ref
        trained, _ = _train(sizes, x_train, y_train, epochs, batch, bits)
        rows.append({"bits": bits, "saved_bytes": int(saved), "measured_after_forward": measured_after_forward,
                     "measured_peak": t.measured_peak(), "ledger_peak_delta": t.peak_delta(),
                     "accuracy": _accuracy(trained, x_test, y_test),
                     "grad_rel_error": float(np.linalg.norm(g - ref) / np.linalg.norm(ref)),
                     "grad_cosine": float(g @ ref / (np.linalg.norm(g) * np.linalg.norm(ref)))})
    model = _fresh(state, sizes)

    def step(bits):
        model.zero_grad()
        _loss(model, xb, yb, bits).backward()

    with _one_blas_thread():
        times = interleaved_times({r["bits"]: (lambda b=r["bits"]: step(b)) for r in rows}, repeats=20)
    for r in rows:
        r["saved_ratio"] = r["saved_bytes"] / rows[0]["saved_bytes"]
        r["step_seconds"] = times[r["bits"]]
        r["step_time_ratio"] = times[r["bits"]] / times[32]
    return {"sizes": sizes, "batch": batch, "epochs": epochs, "rows": rows}


def run(quick=False, device="cpu"):
    if device != "cpu":
        raise ValueError("the quantization figures run on the CPU (QuantizedLinear's float-GEMM "
                         "trick is the same on CuPy, but the sweep uses NumPy test data)")
    x_train, y_train, x_test, y_test = data.load_digits()
    epochs = 6 if quick else 20
    model, step = _train(SIZES, x_train, y_train, epochs, 64)
    records = {"config": {"sizes": SIZES, "epochs": epochs, "batch": 64, "calibration": "4 batches of 256",
                          "outliers": f"4 input values of +-{OUTLIER:g}"}}
    records["calibration"] = run_calibration(model.state_dict(), x_train, x_test, y_test)
    records["parameter_bytes"] = parameter_bytes(model.state_dict())
    records["bits"] = run_bits(x_train, y_train, x_test, y_test, 4 if quick else 15, 128, device)
    return records


def plot(records, outdir):
    return [_plot_calibration(records, outdir), _plot_ranges(records, outdir), _plot_bits(records, outdir)]


def _plot_calibration(records, outdir):
    cal = records["calibration"]
    fig, axes = plots.new_figure(ncols=2, width=6.2, height=4.4)
    names = list(CALIBRATORS)
    for ax, data_name in zip(axes, ("clean", "outliers")):
        xs = np.arange(len(names))
        for j, kind in enumerate(("per-tensor", "per-channel")):
            acc = [100 * cal["accuracy"][f"{data_name}|{n}|{kind}"] for n in names]
            bars = ax.bar(xs + (j - 0.5) * 0.38, acc, 0.38, label=f"int8, {kind} weights")
            for b, a in zip(bars, acc):
                ax.text(b.get_x() + b.get_width() / 2, a + 0.5, f"{a:.1f}", ha="center", fontsize=6, rotation=90)
        ax.axhline(100 * cal["fp32_accuracy"], color="k", ls="--", lw=1,
                   label=f"fp32 {100 * cal['fp32_accuracy']:.1f} %")
        ax.set_xticks(xs)
        ax.set_xticklabels(names, rotation=20, fontsize=7)
        low = min(min(100 * v for k, v in cal["accuracy"].items() if k.startswith(data_name)),
                  100 * cal["fp32_accuracy"])
        ax.set_ylim(max(0, 10 * np.floor(low / 10) - 10), 104)
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"digits MLP, calibrated on {'clean data' if data_name == 'clean' else f'data + 4 outliers of ±{OUTLIER:g}'}",
                     fontsize=9)
        # Clean: every bar is near the top; with outliers the left middle is free.
        ax.legend(fontsize=7, loc="lower right" if data_name == "clean" else "center left", framealpha=0.95)
    pb = records["parameter_bytes"]
    t = cal["inference_seconds"]
    fig.suptitle(f"Post-training int8. Ledger parameter bytes: weights {pb['fp32_weights']:,} -> "
                 f"{pb['int8_weights']:,} B ({pb['fp32_weights'] / pb['int8_weights']:.1f}x), whole model with "
                 f"fp32 bias, scales, column sums {pb['fp32']:,} -> {pb['int8_model']:,} B "
                 f"({pb['fp32'] / pb['int8_model']:.2f}x).\nTest-set inference: int8 takes "
                 f"{t['int8'] / t['fp32']:.1f}x the fp32 time here (NumPy has no int8 kernels: the gain is memory)",
                 fontsize=8)
    return plots.save(fig, records, outdir, FIGURES[0])


def _plot_ranges(records, outdir):
    ranges = records["calibration"]["ranges"]
    fig, axes = plots.new_figure(ncols=2, width=6.2, height=4.4)
    colors = ["#c44e52", "#dd8452", "#55a868", "#4c72b0", "#8172b3"]
    for ax, data_name in zip(axes, ("clean", "outliers")):
        r = ranges[data_name]
        edges = np.asarray(r["edges"])
        ax.stairs(np.maximum(r["counts"], 0.5), edges, fill=True, color="#bbbbbb")
        ax.set_yscale("log")
        top = max(r["counts"])
        for k, (name, (lo, hi)) in enumerate(r["calibrators"].items()):
            ax.axvline(hi, color=colors[k], lw=1.4, ls=("-", "--", "-.", ":", "-")[k], label=f"{name}: max {hi:.2f}")
        ax.set_xlabel("input of the second Linear (after ReLU)")
        ax.set_ylabel("count (log)")
        ax.set_ylim(0.4, top * 3)
        ax.set_title(f"calibration on {'clean data' if data_name == 'clean' else 'data + 4 outliers'}", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("The clipping range each calibrator chose (lower end 0 after ReLU)", fontsize=9)
    return plots.save(fig, records, outdir, FIGURES[1])


def _plot_bits(records, outdir):
    b = records["bits"]
    rows = b["rows"]
    labels = [str(r["bits"]) for r in rows]
    fig, axes = plots.new_figure(ncols=4, width=3.3, height=3.8)
    xs = np.arange(len(rows))
    axes[0].bar(xs - 0.2, [r["saved_bytes"] / 2**10 for r in rows], 0.4, label="ledger",
                color=plots.BUCKET_COLORS["activation"])
    axes[0].bar(xs + 0.2, [r["measured_after_forward"] / 2**10 for r in rows], 0.4,
                label="allocator: growth after forward", color="#8c8c8c")
    for x, r in zip(xs, rows):
        axes[0].text(x - 0.2, r["saved_bytes"] / 2**10, f"{r['saved_ratio']:.3f}x", ha="center", va="bottom", fontsize=7)
    axes[0].set_ylabel("KiB")
    axes[0].set_title("saved activations after forward", fontsize=9)
    axes[0].legend(fontsize=6)
    axes[1].bar(xs, [100 * r["accuracy"] for r in rows], color="#4c72b0")
    for x, r in zip(xs, rows):
        axes[1].text(x, 100 * r["accuracy"], f"{100 * r['accuracy']:.1f}", ha="center", va="bottom", fontsize=7)
    axes[1].set_ylim(0, 105)
    axes[1].set_title(f"test accuracy after {b['epochs']} epochs", fontsize=9)
    axes[2].bar(xs, [r["step_time_ratio"] for r in rows], color="#8c8c8c")
    for x, r in zip(xs, rows):
        axes[2].text(x, r["step_time_ratio"], f"{1e3 * r['step_seconds']:.1f} ms", ha="center", va="bottom", fontsize=7)
    axes[2].set_ylabel("x the fp32 step")
    axes[2].set_title("forward+backward time (1 BLAS thread)", fontsize=9)
    axes[3].bar(xs, [r["grad_rel_error"] for r in rows], color="#dd8452")
    for x, r in zip(xs, rows):
        axes[3].text(x, r["grad_rel_error"], f"{r['grad_rel_error']:.3f}", ha="center", va="bottom", fontsize=7)
    axes[3].set_title("|g - g32| / |g32|, first step", fontsize=9)
    for ax in axes:
        ax.set_xticks(xs)
        ax.set_xticklabels(labels)
        ax.set_xlabel("bits per saved activation")
    fig.suptitle(f"Training MLP {b['sizes']} (batch {b['batch']}) with compressed saved activations", fontsize=9)
    return plots.save(fig, records, outdir, FIGURES[2])
