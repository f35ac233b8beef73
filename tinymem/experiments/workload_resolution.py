"""Figure: a segmentation U-Net's memory and step time against image resolution.

One Adam training step of :class:`tinymem.models.unet.UNet` (batch 1) on CT-like phantoms at each
resolution, four ways: plain float32, per-block checkpointing
(``model.checkpoint_fn = tinymem.techniques.checkpoint.checkpoint``), float16 storage
(``tinymem.techniques.precision.half`` with a GradScaler), and both. Recorded per run: the
ledger's activation peak, its total device peak above the model's resting bytes, the
allocator's measured peak (tracemalloc or the CuPy pool), and the step times of a few turns
taken side by side (interleaved) at each resolution up to ``time_up_to`` (median and
interquartile range of CPU time, which other jobs on a shared machine do not inflate; one
BLAS thread).

The third panel is the quality side: Dice of a U-Net trained on 128 px phantoms (full mode; in
quick mode a short run at 32 px, so its Dice is far from the target).
"""
import time

import numpy as np

from .. import memory, models, optim, random
from ..autograd import Tensor, no_grad
from ..measure.claims import IN_TURNS, Claim, slower_in_turns
from ..measure.timing import interleaved_samples, one_blas_thread, spread
from ..data.phantoms import CLASSES, make_phantoms
from ..techniques import precision
from ..techniques.checkpoint import checkpoint
from .. import plots

NAME = "workload_resolution"
ORDER = 60
FIGURES = ["workload_resolution.png"]
CONFIGS = ("float32", "checkpoint", "float16", "checkpoint+float16")
_CLASS_COLORS = ("#8172b3", "#55a868", "#ccb974")
_STYLE = {"float32": ("#4c72b0", "-"), "checkpoint": ("#c44e52", "-"),
          "float16": ("#4c72b0", "--"), "checkpoint+float16": ("#c44e52", "--")}


def build(config, base, depth, device, lr=1e-3):
    """(model to call, optimizer, scaler or None) for one configuration, from seed 0."""
    random.manual_seed(0)
    net = models.UNet(base=base, depth=depth, device=device)
    if "checkpoint" in config:
        net.checkpoint_fn = checkpoint
    opt = optim.Adam(net.parameters(), lr=lr)
    if "float16" in config:
        model, opt = precision.half(net, opt, "float16")
        return model, opt, precision.GradScaler()
    return net, opt, None


def train_step(model, opt, scaler, x, y):
    opt.zero_grad()
    loss = models.segmentation_loss(model(x), y)
    if scaler is None:
        loss.backward()
        opt.step()
    else:
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    return loss.item()


def sweep(resolutions, base, depth, device, repeats, time_up_to=None, steps_per_sample=1, warmup=0):
    """Memory of one step (the second: Adam's state exists) per configuration and resolution,
    and the step times in turns at the resolutions up to ``time_up_to`` (all when None), each
    timing the mean of ``steps_per_sample`` steps in a row (longer samples, less jitter), after
    ``warmup`` untimed turns (without one, the first configuration's first turn runs cold: it
    made float32 the slower in the first turn at 64 and 128 px)."""
    rows = []
    for res in resolutions:
        images, labels = make_phantoms(1, res)
        x, y = Tensor(images, device=device), Tensor(labels, device=device)
        setups = {c: build(c, base, depth, device) for c in CONFIGS}
        for config, (model, opt, scaler) in setups.items():
            train_step(model, opt, scaler, x, y)  # the first step creates Adam's state
            with memory.track(device=device) as t:
                train_step(model, opt, scaler, x, y)
            rows.append({"resolution": res, "config": config,
                         "activation_peak": t.max_by_bucket()["activation"],
                         "peak_delta": t.peak_delta(), "measured_peak": t.measured_peak()})
        if time_up_to is not None and res > time_up_to:
            continue
        with one_blas_thread():
            samples = interleaved_samples({c: (lambda s=s: [train_step(*s, x, y) for _ in range(steps_per_sample)])
                                           for c, s in setups.items()},
                                          repeats=repeats, warmup=warmup, clock=time.process_time)
        samples = {c: [t / steps_per_sample for t in ts] for c, ts in samples.items()}
        for row in rows[-len(CONFIGS):]:
            row["step_samples"] = samples[row["config"]]
            row["step_seconds"] = spread(samples[row["config"]])["median"]
    return rows


def train_dice(resolution, steps, batch, base, depth, device, n_train=256, n_val=32):
    """Train a U-Net on phantoms; Dice on held-out phantoms (another seed) every few steps."""
    model, opt, _ = build("float32", base, depth, device, lr=3e-3)
    images, labels = make_phantoms(n_train, resolution, seed=0)
    val_x, val_y = make_phantoms(n_val, resolution, seed=1)
    rng = np.random.default_rng(0)
    curve = []

    def evaluate():
        model.eval()
        with no_grad():
            pred = np.concatenate([model(Tensor(val_x[i:i + 8], device=device)).numpy().argmax(1)
                                   for i in range(0, n_val, 8)])
        model.train()
        per_class = [models.dice_score(np.where(pred == c, 1, 0), np.where(val_y == c, 1, 0), 2)
                     for c in range(1, len(CLASSES))]
        return models.dice_score(pred, val_y, len(CLASSES)), per_class

    for step in range(1, steps + 1):
        idx = rng.choice(n_train, batch, replace=False)
        loss = train_step(model, opt, None, Tensor(images[idx], device=device),
                          Tensor(labels[idx], device=device))
        if step % max(1, steps // 8) == 0 or step == steps:
            dice, per_class = evaluate()
            curve.append({"step": step, "loss": loss, "dice": dice, "dice_per_class": per_class})
    return {"resolution": resolution, "steps": steps, "batch": batch, "base": base, "depth": depth,
            "classes": list(CLASSES[1:]), "curve": curve, "dice": curve[-1]["dice"]}


def run(quick=False, device="cpu"):
    base, depth = 8, 4
    resolutions = [32, 64, 128] if quick else [64, 128, 256, 512, 1024]
    # Timing the largest size in turns would take most of the run: its memory is measured, not
    # its time. Quick mode judges no timing claim (they are full-mode), so it times the two
    # smallest sizes, 3 turns each: the CI-sized run checks that timing works, not what it says.
    rows = sweep(resolutions, base, depth, device, repeats=3 if quick else 7, time_up_to=64 if quick else 512,
                 steps_per_sample=1 if quick else 3, warmup=0 if quick else 1)
    dice = (train_dice(32, 20, 4, base, depth, device, n_train=32, n_val=8) if quick
            else train_dice(128, 150, 8, base, depth, device))
    return {"config": {"base": base, "depth": depth, "batch": 1, "optimizer": "Adam",
                       "configs": list(CONFIGS)},
            "rows": rows, "dice": dice}


def _row(r, config, resolution):
    return next(x for x in r["rows"] if x["config"] == config and x["resolution"] == resolution)


def _largest(r, timed=False):
    return max(x["resolution"] for x in r["rows"] if not timed or "step_samples" in x)


def _activation_ratio(r, config):
    res = _largest(r)
    return _row(r, config, res)["activation_peak"] / _row(r, "float32", res)["activation_peak"]


def _growth(r):
    sizes = sorted({x["resolution"] for x in r["rows"]})
    return _row(r, "float32", sizes[-1])["activation_peak"] / _row(r, "float32", sizes[-2])["activation_peak"]


def _slower_at_every_resolution(config):
    """``config``'s steps slower than float32's, turn by turn, at each timed resolution; the
    value lists each resolution's "slower turns, ratio of lower quartiles". (Once stated as ">= 3
    spreads at the largest image" for checkpointing + float16, then as medians: an effect of
    1.4x measured 2.5 and 3.0 spreads of 7 one-second samples in two reruns.)"""
    def check(r):
        timed = sorted({x["resolution"] for x in r["rows"] if "step_samples" in x})
        verdicts = [slower_in_turns(_row(r, config, res)["step_samples"], _row(r, "float32", res)["step_samples"])
                    for res in timed]
        return "; ".join(v for v, _ in verdicts), all(h for _, h in verdicts)
    return check


CLAIMS = [
    Claim("activations_quadratic", "float32 activations grow 4x (+-10%) per doubling of the image side",
          lambda r: (_growth(r), abs(_growth(r) / 4 - 1) <= 0.1)),
    Claim("checkpoint_half", "per-block checkpointing keeps <= 0.5x float32's activations at the largest image",
          lambda r: (_activation_ratio(r, "checkpoint"), _activation_ratio(r, "checkpoint") <= 0.5), modes=("full",)),
    Claim("float16_half", "float16 storage keeps <= 0.55x float32's activations at the largest image",
          lambda r: (_activation_ratio(r, "float16"), _activation_ratio(r, "float16") <= 0.55)),
    Claim("both_third", "checkpointing and float16 together keep <= 0.3x float32's activations at the largest image",
          lambda r: (_activation_ratio(r, "checkpoint+float16"), _activation_ratio(r, "checkpoint+float16") <= 0.3),
          modes=("full",)),
    Claim("checkpoint_costs_time", "checkpointing makes the step slower (recomputation) at every timed resolution, "
          + IN_TURNS, _slower_at_every_resolution("checkpoint"), modes=("full",)),
    Claim("both_cost_time", "checkpointing and float16 together make the step slower at every timed resolution, "
          + IN_TURNS, _slower_at_every_resolution("checkpoint+float16"), modes=("full",)),
    Claim("dice", "the U-Net trained at 128 px reaches Dice >= 0.9 on held-out phantoms",
          lambda r: (r["dice"]["dice"], r["dice"]["dice"] >= 0.9 and r["dice"]["resolution"] == 128), modes=("full",)),
]


def plot(records, outdir):
    fig, axes = plots.new_figure(ncols=3, width=4.1, height=4.2)
    rows, cfg = records["rows"], records["config"]
    for config in cfg["configs"]:
        mine = sorted((r for r in rows if r["config"] == config), key=lambda r: r["resolution"])
        res = [r["resolution"] for r in mine]
        color, ls = _STYLE.get(config, ("k", "-"))
        axes[0].plot(res, [r["activation_peak"] / 2**20 for r in mine], ls, color=color, marker="o", label=config)
        timed = [r for r in mine if "step_samples" in r]
        plots.timing_line(axes[1], [r["resolution"] for r in timed], [r["step_samples"] for r in timed],
                          scale=1.0, fmt="o" + ls, color=color, label=config)
    axes[0].set_xscale("log", base=2)
    axes[0].set_yscale("log")
    axes[1].set_xscale("log", base=2)
    axes[1].set_ylim(bottom=0)
    for ax in axes[:2]:
        ax.set_xlabel("image side (pixels)")
    axes[0].legend(loc="upper left")  # one legend for both panels: the same configurations, same styles
    axes[0].set_ylabel("activation peak (MiB, ledger, log)")
    axes[0].set_title(f"U-Net (base {cfg['base']}, depth {cfg['depth']}),\nbatch {cfg['batch']}: saved activations")
    axes[1].set_ylabel("training step, CPU s: median, IQR")
    timed = max((r["resolution"] for r in rows if "step_samples" in r), default=0)
    axes[1].set_title(f"step time, in turns, 1 BLAS thread\n(timed up to {timed} px)")
    d = records["dice"]
    steps = [p["step"] for p in d["curve"]]
    axes[2].plot(steps, [p["dice"] for p in d["curve"]], "k-o", label="mean Dice")
    for i, name in enumerate(d["classes"]):
        axes[2].plot(steps, [p["dice_per_class"][i] for p in d["curve"]], ":", color=_CLASS_COLORS[i % 3],
                     label=name)
    axes[2].axhline(0.9, color="#888888", lw=0.8, ls=":").set_gid(plots.BACKGROUND)
    axes[2].set_ylim(0, 1.3)
    axes[2].set_yticks([0, 0.2, 0.4, 0.6, 0.8, 1.0])
    axes[2].set_xlabel("training step")
    axes[2].set_ylabel("Dice on held-out phantoms")
    axes[2].set_title(f"quality at {d['resolution']} px:\nDice {d['dice']:.3f} (dotted line: 0.9)")
    axes[2].legend(loc="upper center", ncols=2)
    res = _largest(records)
    note = (f"What to see: activations grow with the pixels (4x per doubling); at {res} px checkpointing keeps "
            f"{_activation_ratio(records, 'checkpoint'):.2f}x of them, float16 {_activation_ratio(records, 'float16'):.2f}x, "
            f"both {_activation_ratio(records, 'checkpoint+float16'):.2f}x, for a slower step (recomputation; NumPy "
            f"computes float16 in float32).")
    return [plots.save(fig, records, outdir, FIGURES[0], note=note)]
