"""Figure: a segmentation U-Net's memory and step time against image resolution.

One Adam training step of :class:`tinymem.models.unet.UNet` (batch 1) on CT-like phantoms at each
resolution, four ways: plain float32, per-block checkpointing
(``model.checkpoint_fn = tinymem.techniques.checkpoint.checkpoint``), float16 storage
(``tinymem.techniques.precision.half`` with a GradScaler), and both. Recorded per run: the
ledger's activation peak, its total device peak above the model's resting bytes, the
allocator's measured peak (tracemalloc or the CuPy pool), and the best step time of a few,
measured side by side (interleaved) at each resolution.

The third panel is the quality side: Dice of a U-Net trained on 128 px phantoms (full mode; in
quick mode a short run at 32 px, so its Dice is far from the target).
"""
import numpy as np

from .. import memory, models, optim, random
from ..autograd import Tensor, no_grad
from ..measure.timing import interleaved_times
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


def sweep(resolutions, base, depth, device, repeats):
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
        times = interleaved_times({c: (lambda s=s: train_step(*s, x, y)) for c, s in setups.items()},
                                  repeats=repeats, warmup=0)
        for row in rows[-len(CONFIGS):]:
            row["step_seconds"] = times[row["config"]]
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
    rows = sweep(resolutions, base, depth, device, repeats=1 if quick else 2)
    dice = (train_dice(32, 20, 4, base, depth, device, n_train=32, n_val=8) if quick
            else train_dice(128, 150, 8, base, depth, device))
    return {"config": {"base": base, "depth": depth, "batch": 1, "optimizer": "Adam",
                       "configs": list(CONFIGS)},
            "rows": rows, "dice": dice}


def plot(records, outdir):
    fig, axes = plots.new_figure(ncols=3, width=5.0, height=4.2)
    rows, cfg = records["rows"], records["config"]
    for config in cfg["configs"]:
        mine = sorted((r for r in rows if r["config"] == config), key=lambda r: r["resolution"])
        res = [r["resolution"] for r in mine]
        color, ls = _STYLE.get(config, ("k", "-"))
        axes[0].plot(res, [r["activation_peak"] / 2**20 for r in mine], ls, color=color, marker="o", label=config)
        axes[1].plot(res, [r["step_seconds"] for r in mine], ls, color=color, marker="o", label=config)
    for ax in axes[:2]:
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("image side (pixels)")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("activation peak (MiB, ledger)")
    axes[0].set_title(f"U-Net (base {cfg['base']}, depth {cfg['depth']}), batch {cfg['batch']}: activations")
    axes[1].set_ylabel("training step (s, best of runs)")
    axes[1].set_title("step time (best of a few, interleaved)")
    d = records["dice"]
    steps = [p["step"] for p in d["curve"]]
    axes[2].plot(steps, [p["dice"] for p in d["curve"]], "k-o", label="mean Dice")
    for i, name in enumerate(d["classes"]):
        axes[2].plot(steps, [p["dice_per_class"][i] for p in d["curve"]], ":", color=_CLASS_COLORS[i % 3],
                     label=name)
    axes[2].axhline(0.9, color="#888888", lw=0.8, ls=":")
    axes[2].set_ylim(0, 1)
    axes[2].set_xlabel("training step")
    axes[2].set_ylabel("Dice on held-out phantoms")
    axes[2].set_title(f"quality at {d['resolution']} px: Dice {d['dice']:.3f}")
    axes[2].legend(fontsize=7)
    return [plots.save(fig, records, outdir, FIGURES[0])]
