"""Figures: mixed precision (fp16 / bf16 storage, fp32 masters, loss scaling).

- ``precision_gradient_histogram.png``: log2 histogram of gradient magnitudes from an fp32
  training run (gradients between modules and parameter gradients) against float16's range,
  unscaled and scaled by 2^16: the picture of Micikevicius et al. (2018), on our model.
- ``precision_training.png``: loss curves of fp32, fp16 without scaling, fp16 with a static
  scale, fp16 with dynamic scaling and bf16 on a task whose gradients are small: a regression
  whose loss is computed in small units (predictions and targets of size ~3e-3, so the MSE
  gradient 2(y_hat - y)/N is ~1e-8 per output); beside it, digits test accuracy per mode.
- ``precision_memory.png``: peak device bytes by bucket per mode on an activation-dominated
  MLP (benchmark ``precision``), fp32 master weights counted, ledger and measured.
- ``precision_scale.png``: the dynamic loss scale over steps on digits, with the skipped
  (overflowed) steps marked; growth_interval=20 instead of 2000 so a short run shows the cycle.
"""
import time

import numpy as np

from .. import data, models, optim, plots, random
from .. import functional as F
from ..autograd import Function, Tensor, no_grad
from . import precision_steps as bench
from ..techniques import precision

NAME = "precision"
ORDER = 20
FIGURES = ["precision_gradient_histogram.png", "precision_training.png", "precision_memory.png",
           "precision_scale.png"]

UNIT = 3e-3          # the regression's predictions and targets are this small
BINS = np.arange(-48, 24)  # log2 |g| bin edges
MODES = {  # label: (storage dtype, GradScaler arguments or None)
    "fp32": ("float32", None),
    "fp16, no scaling": ("float16", None),
    "fp16, static scale 1024": ("float16", dict(init_scale=1024.0, growth_factor=1.0, backoff_factor=1.0)),
    "fp16, dynamic scaling": ("float16", {}),
    "bf16": ("bfloat16", None),
}


class _GradProbe(Function):
    """Identity; backward hands a sample of |g| to ``sink`` (for the histogram)."""

    def forward(ctx, a, sink=None):
        ctx.sink = sink
        return a

    def backward(ctx, g):
        ctx.sink.append(np.abs(np.asarray(g, np.float64)).ravel()[::7])
        return g


def _probe_outputs(model, sink):
    """Wrap every leaf module so the gradient reaching its output is sampled."""
    for m in model.modules():
        if not m.children():
            cls_forward = type(m).forward
            object.__setattr__(m, "forward", lambda *a, _m=m, _f=cls_forward: _GradProbe.apply(_f(_m, *a), sink=sink))


def _regression_data():
    x, _, _, _ = data.load_digits()
    random.manual_seed(123)
    teacher = models.MLP([64, 32, 8], activation="tanh")
    with no_grad():
        y = teacher(Tensor(x)).numpy() * 3.0
    return x, y


def train_regression(mode, steps, scaler_kw=None, probe=None, batch=128, lr=3e-3):
    """MLP(64-32-32-8, tanh) on a teacher's outputs; loss = mse(UNIT * model(x), UNIT * y).

    Returns the loss in units of UNIT^2 per step, the scale per step and the skipped steps.
    """
    x, y = _regression_data()
    random.manual_seed(0)
    model = models.MLP([64, 32, 32, 8], activation="tanh")
    opt = optim.Adam(model.parameters(), lr=lr)
    if probe is not None:
        _probe_outputs(model, probe["between modules"])
    run = model
    if mode != "float32":
        run, opt = precision.half(model, opt, dtype=mode)
    scaler = precision.GradScaler(**scaler_kw) if scaler_kw is not None else precision.GradScaler(enabled=False)
    losses, scales, skipped = [], [], []
    step, start = 0, time.perf_counter()
    while step < steps:
        for xb, yb in data.DataLoader((x, y * UNIT), batch_size=batch, seed=step, drop_last=True):
            opt.zero_grad()
            loss = F.mse_loss(run(xb) * UNIT, yb)
            scaler.scale(loss).backward()
            if probe is not None and step % 5 == 0:
                probe["parameters"].extend(np.abs(p.grad.numpy().astype(np.float64)).ravel()
                                           for p in model.parameters())
            scales.append(scaler.get_scale())
            scaler.step(opt)
            if scaler.found_inf(opt):
                skipped.append(step)
            scaler.update()
            losses.append(loss.item() / UNIT**2)
            step += 1
            if step == steps:
                break
    return {"loss": losses, "scale": scales, "skipped": skipped, "seconds": time.perf_counter() - start}


def train_digits(mode, epochs, scaler_kw=None, seed=0):
    """MLP(64-64-64-10) on digits with Adam; test accuracy (percent), scale and skipped steps."""
    x_train, y_train, x_test, y_test = data.load_digits(test_fraction=0.5)
    random.manual_seed(seed)
    model = models.MLP([64, 64, 64, 10])
    opt = optim.Adam(model.parameters(), lr=2e-3)
    run = model
    if mode != "float32":
        run, opt = precision.half(model, opt, dtype=mode)
    scaler = precision.GradScaler(**scaler_kw) if scaler_kw is not None else precision.GradScaler(enabled=False)
    scales, skipped, step = [], [], 0
    for epoch in range(epochs):
        for xb, yb in data.DataLoader((x_train, y_train), batch_size=64, seed=epoch + 100 * seed):
            opt.zero_grad()
            scaler.scale(F.cross_entropy(run(xb), yb)).backward()
            scales.append(scaler.get_scale())
            scaler.step(opt)
            if scaler.found_inf(opt):
                skipped.append(step)
            scaler.update()
            step += 1
    with no_grad():
        pred = run(Tensor(x_test)).numpy().argmax(1)
    return {"accuracy": 100.0 * float((pred == y_test).mean()), "scale": scales, "skipped": skipped}


def _histogram(values):
    v = np.concatenate(values) if values else np.zeros(0)
    nonzero = v[v > 0]
    counts, _ = np.histogram(np.log2(nonzero), bins=BINS)
    return {"counts": counts.tolist(), "zeros": int((v == 0).sum()), "total": int(v.size),
            "unscaled": precision.fp16_range_report([v]), "scaled": precision.fp16_range_report([v], 2.0**16)}


def run(quick=False, device="cpu"):
    steps = 80 if quick else 400
    probe = {"between modules": [], "parameters": []}
    training = {}
    for label, (mode, scaler_kw) in MODES.items():
        training[label] = train_regression(mode, steps, scaler_kw, probe=probe if label == "fp32" else None)
    epochs, seeds = (2, 1) if quick else (10, 3)
    accuracy = {}
    for label, mode, kw in (("fp32", "float32", None), ("fp16, dynamic scaling", "float16", {}),
                            ("bf16", "bfloat16", None)):
        accuracy[label] = [train_digits(mode, epochs, kw, seed)["accuracy"] for seed in range(seeds)]
    scale_run = train_digits("float16", epochs, dict(growth_interval=20))
    memory_rows = {mode: bench.step_memory(mode, *bench.SIZES["quick" if quick else "full"], device=device)
                   for mode in bench.MODES}
    return {"config": {"steps": steps, "unit": UNIT, "digits_epochs": epochs, "digits_seeds": seeds,
                       "memory_sizes": bench.SIZES["quick" if quick else "full"]},
            "histogram": {k: _histogram(v) for k, v in probe.items()}, "bins": BINS.tolist(),
            "training": training, "accuracy": accuracy, "scale_run": scale_run, "memory": memory_rows}


# -- plots -----------------------------------------------------------------------------------------
_FP16 = [(np.log2(precision.FP16_MIN_SUBNORMAL), "min subnormal 5.96e-8"),
         (np.log2(precision.FP16_MIN_NORMAL), "min normal 6.10e-5"), (np.log2(precision.FP16_MAX), "max 65504")]


def _plot_histogram(records, outdir):
    fig, axes = plots.new_figure(ncols=2, width=6.0)
    bins = np.array(records["bins"])
    centers = (bins[:-1] + bins[1:]) / 2
    colors = {"between modules": "#c44e52", "parameters": "#4c72b0"}
    for ax, (shift, title) in zip(axes, ((0, "unscaled"), (16, "scaled by 2^16"))):
        ax.axvspan(-45, _FP16[0][0] - 1, color="#dddddd", label="becomes 0 in fp16")
        ax.axvspan(_FP16[0][0] - 1, _FP16[1][0], color="#f3e3c3", label="fp16 subnormal (fewer bits)")
        ax.axvspan(_FP16[2][0], 20, color="#f2c4c4", label="becomes inf in fp16")
        for name, h in records["histogram"].items():
            counts = np.array(h["counts"]) / max(h["total"], 1)
            rep = h["scaled" if shift else "unscaled"]
            ax.step(centers + shift, counts, where="mid", color=colors[name],
                    label=f"{name}: {100 * rep['underflow']:.1f}% -> 0, {100 * rep['overflow']:.2f}% -> inf")
        for pos, text in _FP16:
            ax.axvline(pos, color="k", lw=0.6, ls="--")
            ax.text(pos, ax.get_ylim()[1] * 0.45, text, rotation=90, fontsize=6, va="top", ha="right")
        ax.set_xlim(-45, 20)
        ax.set_xlabel("log2 |gradient|")
        ax.set_ylabel("fraction of values")
        ax.set_title(f"gradients of the fp32 regression run (precision_training), {title}", fontsize=8)
        ax.legend(fontsize=6, loc="upper left")
    return plots.save(fig, records, outdir, FIGURES[0])


def _plot_training(records, outdir):
    fig, (ax, bx) = plots.new_figure(ncols=2, width=5.6)
    for label, r in records["training"].items():
        loss = np.array(r["loss"])
        smooth = np.convolve(loss, np.ones(10) / 10, mode="valid")
        ax.plot(np.arange(len(smooth)) + 9, smooth, label=label, lw=1.2,
                ls="--" if label in ("fp16, dynamic scaling", "bf16") else "-")
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel(f"MSE / unit^2 (unit = {records['config']['unit']:g}), 10-step mean")
    ax.set_title("regression with a small loss (gradients ~1e-8): fp16 unscaled stalls", fontsize=9)
    ax.legend(fontsize=7, title="fp32, fp16 scaled and bf16 overlap", title_fontsize=7)
    labels = list(records["accuracy"])
    means = [np.mean(records["accuracy"][k]) for k in labels]
    bx.bar(range(len(labels)), means, color=["#4c72b0", "#dd8452", "#55a868"])
    for i, k in enumerate(labels):
        bx.plot([i] * len(records["accuracy"][k]), records["accuracy"][k], "k.", ms=4)
        bx.text(i, min(means) - 4, f"{means[i]:.2f}%", ha="center", fontsize=9, color="white")
    bx.set_xticks(range(len(labels)))
    bx.set_xticklabels(labels, fontsize=7)
    bx.set_ylim(min(means) - 5, 100)
    bx.set_ylabel("digits test accuracy (%)")
    bx.set_title(f"digits, mean of {records['config']['digits_seeds']} seeds (dots: each seed)", fontsize=9)
    return plots.save(fig, records, outdir, FIGURES[1])


def _plot_memory(records, outdir):
    from ..memory import BUCKETS
    fig, ax = plots.new_figure(width=7.0)
    modes = list(records["memory"])
    bottom = np.zeros(len(modes))
    for bucket in BUCKETS:
        vals = np.array([records["memory"][m]["peak_by_bucket"][bucket] / 2**20 for m in modes])
        ax.bar(range(len(modes)), vals, bottom=bottom, color=plots.BUCKET_COLORS[bucket], label=bucket, width=0.5)
        bottom += vals
    base = records["memory"]["float32"]
    for i, m in enumerate(modes):
        r = records["memory"][m]
        ax.plot(i + 0.32, r["measured_peak"] / 2**20, "kD", ms=5, label="measured (tracemalloc)" if i == 0 else None)
        ax.text(i, max(bottom[i], r["measured_peak"] / 2**20) * 1.03, f"ledger {r['ledger_peak'] / base['ledger_peak']:.2f}x\n"
                f"measured {r['measured_peak'] / base['measured_peak']:.2f}x", ha="center", fontsize=7)
    w, d, b = records["config"]["memory_sizes"]
    ax.set_xticks(range(len(modes)))
    ax.set_xticklabels([m + (" (+fp32 masters)" if m != "float32" else "") for m in modes], fontsize=8)
    ax.set_ylabel("peak device MiB (ledger, by bucket at the peak)")
    top = max(bottom.max(), max(records["memory"][m]["measured_peak"] / 2**20 for m in modes))
    ax.set_ylim(0, top * 1.25)
    ax.set_title(f"one Adam step, MLP {d} x (Linear {w}, LayerNorm, GELU), batch {b}; masters in 'optimizer'",
                 fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    return plots.save(fig, records, outdir, FIGURES[2])


def _plot_scale(records, outdir):
    fig, ax = plots.new_figure(width=7.0)
    r = records["scale_run"]
    ax.step(range(len(r["scale"])), r["scale"], where="post", color="#4c72b0", label="loss scale")
    ax.plot(r["skipped"], [r["scale"][s] for s in r["skipped"]], "rx", label=f"skipped step ({len(r['skipped'])})")
    ax.set_yscale("log", base=2)
    ax.set_xlabel("step")
    ax.set_ylabel("scale")
    ax.set_title(f"dynamic loss scale, fp16 MLP on digits (growth_interval=20, backoff 0.5): "
                 f"test accuracy {r['accuracy']:.1f}%", fontsize=9)
    ax.legend(fontsize=7)
    return plots.save(fig, records, outdir, FIGURES[3])


def plot(records, outdir):
    return [_plot_histogram(records, outdir), _plot_training(records, outdir),
            _plot_memory(records, outdir), _plot_scale(records, outdir)]
