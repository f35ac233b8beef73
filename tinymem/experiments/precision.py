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

from .. import backend, data, models, optim, random
from .. import functional as F
from ..autograd import Function, Tensor, no_grad
from ..measure.claims import Claim
from . import precision_plots as figures
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
        ctx.sink.append(np.abs(backend.to_numpy(g).astype(np.float64)).ravel()[::7])  # host: a histogram
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


def _final(r, label):
    """The mean loss of the last 10 steps of a regression run."""
    return float(np.mean(r["training"][label]["loss"][-10:]))


def _scaled_track(r):
    worst = max(abs(_final(r, k) / _final(r, "fp32") - 1)
                for k in ("fp16, static scale 1024", "fp16, dynamic scaling", "bf16"))
    return worst, worst <= 0.05


def _accuracy_gap(r):
    fp32 = np.mean(r["accuracy"]["fp32"])
    worst = max(abs(np.mean(v) - fp32) for k, v in r["accuracy"].items() if k != "fp32")
    return worst, worst <= 0.5


def _half_peak(r):
    ratio = max(r["memory"][m]["measured_peak"] for m in ("float16", "bfloat16")) / r["memory"]["float32"]["measured_peak"]
    return ratio, ratio <= 0.6


def _ledger_vs_allocator(r):
    worst = max(abs(m["ledger_peak"] / m["measured_peak"] - 1) for m in r["memory"].values())
    return worst, worst <= 0.1


CLAIMS = [
    Claim("unscaled_underflow", "unscaled, >= 90% of the gradients between modules become 0 in fp16",
          lambda r: (lambda v: (v, v >= 0.9))(r["histogram"]["between modules"]["unscaled"]["underflow"])),
    Claim("scaled_in_range", "scaled by 2^16, < 1% of the gradients become 0 and none overflow",
          lambda r: (lambda h: (max(x["scaled"]["underflow"] for x in h.values()),
                                all(x["scaled"]["underflow"] < 0.01 and x["scaled"]["overflow"] == 0 for x in h.values())))
          (r["histogram"])),
    Claim("fp16_unscaled_stalls", "fp16 without scaling stalls: its final loss is >= 10x fp32's",
          lambda r: (lambda v: (v, v >= 10))(_final(r, "fp16, no scaling") / _final(r, "fp32"))),
    Claim("scaled_track_fp32", "static and dynamic scaling and bf16 end within 5% of fp32's final loss", _scaled_track),
    Claim("digits_accuracy", "on digits, fp16 (dynamic scaling) and bf16 are within 0.5 points of fp32 (mean of seeds)",
          _accuracy_gap, modes=("full",)),
    Claim("half_peak", "fp16 and bf16 need <= 0.6x fp32's measured peak, fp32 masters counted", _half_peak,
          modes=("full",)),
    Claim("ledger_vs_allocator", "the ledger's peak is within 10% of the allocator's for every mode", _ledger_vs_allocator,
          modes=("full",)),
    Claim("scale_skips_and_trains", "dynamic scaling skips overflowing steps (>= 1) and the run still reaches 90% accuracy",
          lambda r: (len(r["scale_run"]["skipped"]), len(r["scale_run"]["skipped"]) >= 1 and r["scale_run"]["accuracy"] >= 90),
          modes=("full",)),
]


def plot(records, outdir):
    return figures.plot(records, outdir, FIGURES)
