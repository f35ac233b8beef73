"""Figures: optimizers compared by the memory of their state, at a fair tuned learning rate.

One MLP on the digits data. For every optimizer configuration of ``tinymem.optim.table``:
- the state bytes per parameter after one step, from the ledger (and the formula beside it);
- the peak bytes per bucket in one training step once the state exists, with the allocator's
  measured growth in the first step (when the state is created) beside the ledger's;
- a small learning-rate sweep (the same seed and data order for each value), keeping the value
  with the lowest held-out loss: one learning rate for all would compare tunings, not optimizers.
  The 8-bit variants reuse Adam's tuned rate, so "8-bit vs 32-bit" is the same run but the state.
"""
import gc
import math
import time

import numpy as np

from .. import data, memory, models, plots, random
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..measure.timing import best_time
from ..optim import table
from ..optim.table import CONFIGS

NAME = "optimizers"
ORDER = 50
FIGURES = ["optim_state_bytes.png", "optim_training.png", "optim_memory_breakdown.png", "optim_pareto.png"]

LR_GRIDS = {
    "SGD": [0.1, 0.3, 1.0, 3.0],
    "SGD momentum": [0.003, 0.01, 0.03, 0.1],
    "Adagrad": [0.003, 0.01, 0.03, 0.1],
    "RMSprop": [1e-4, 3e-4, 1e-3, 3e-3],
    "Adam": [3e-4, 1e-3, 3e-3, 1e-2],
    "AdamW": [3e-4, 1e-3, 3e-3, 1e-2],
    "Lion": [1e-4, 3e-4, 1e-3, 3e-3],
    "Adafactor": [1e-2, 3e-2, 1e-1, 3e-1],
    "GaLore r=32": [1e-3, 3e-3, 1e-2, 3e-2],
}
SAME_RUN_AS_ADAM = ["Adam8bit", "Adam8bit linear"]


DIVERGED = 10.0  # a held-out loss above this (chance is ln 10 = 2.3) counts as diverged


def _setup(quick):
    # width 512 makes every weight matrix (even the 512 x 10 head) at least 4096 elements, so
    # Adam8bit quantizes all of them; quick mode is smaller, shorter and at one lr per optimizer
    width = 256 if quick else 512
    return {"sizes": [64, width, width, 10], "batch": 128, "epochs": 2 if quick else 6,
            "lrs_per_optimizer": 1 if quick else 4}


def _loss_or_none(value):
    return value if math.isfinite(value) else None


def _epochs(model, opt, loader, test, epochs, train, heldout):
    """Run ``epochs`` passes, appending each step's train loss and each epoch's held-out loss."""
    for _ in range(epochs):
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            train.append(loss.item())
        with no_grad():
            heldout.append(F.cross_entropy(model(test[0]), test[1]).item())
        if not math.isfinite(heldout[-1]):
            break  # diverged: the rest of the run says nothing


def train_digits(label, lr, cfg, arrays, device="cpu", data_seed=0):
    """Train from initialisation seed 0 with the batches shuffled by ``data_seed``; return
    per-step train losses, per-epoch held-out losses, the last epoch's mean train loss, time."""
    x_train, y_train, x_test, y_test = arrays
    random.manual_seed(0)
    model = models.MLP(cfg["sizes"]).to(device)
    cls, options = CONFIGS[label]
    opt = cls(model.parameters(), lr=lr, **options)
    loader = data.DataLoader((x_train, y_train), cfg["batch"], shuffle=True, seed=data_seed, device=device)
    xt, yt = Tensor(x_test, device=device), Tensor(y_test, device=device)
    train, heldout, start = [], [], time.perf_counter()
    # a sweep's largest lr may diverge: that is recorded (loss None), not warned about
    with np.errstate(over="ignore", invalid="ignore"):
        _epochs(model, opt, loader, (xt, yt), cfg["epochs"], train, heldout)
    return {"label": label, "lr": lr, "train_loss": [_loss_or_none(v) for v in train],
            "heldout_loss": [_loss_or_none(v) for v in heldout],
            "final_heldout": _loss_or_none(heldout[-1]),
            "final_train": _loss_or_none(float(np.mean(train[-len(loader):]))),
            "seconds": time.perf_counter() - start, "data_seed": data_seed,
            "state_bytes": opt.state_bytes()}


def _sweep(cfg, arrays, device):
    runs, best = [], {}
    for label, grid in LR_GRIDS.items():
        grid = grid[1:1 + cfg["lrs_per_optimizer"]] if cfg["lrs_per_optimizer"] < len(grid) else grid
        results = [train_digits(label, lr, cfg, arrays, device) for lr in grid]
        runs += results
        finite = [r for r in results if r["final_heldout"] is not None]
        best[label] = min(finite, key=lambda r: r["final_heldout"]) if finite else results[0]
        # a best value at the end of the grid means the sweep did not bracket the optimum
        best[label]["lr_at_grid_edge"] = len(grid) > 1 and best[label]["lr"] in (grid[0], grid[-1])
    for label in SAME_RUN_AS_ADAM:
        best[label] = train_digits(label, best["Adam"]["lr"], cfg, arrays, device)
        runs.append(best[label])
    # the yardstick for "8-bit within x% of 32-bit": 32-bit Adam against itself, other batch order
    noise = train_digits("Adam", best["Adam"]["lr"], cfg, arrays, device, data_seed=1)
    return runs, best, noise


def _param_state_bytes(opt, p):
    return sum(v.nbytes for v in opt.state.get(p, {}).values() if hasattr(v, "nbytes"))


def _memory(label, cfg, arrays, device):
    """Ledger per bucket and allocator measurements around the first and second step."""
    random.manual_seed(0)
    model = models.MLP(cfg["sizes"]).to(device)
    cls, options = CONFIGS[label]
    gc.collect()
    before = memory.live_bytes("optimizer")
    opt = cls(model.parameters(), lr=1e-3, **options)
    x = Tensor(arrays[0][:cfg["batch"]], device=device)
    y = Tensor(arrays[1][:cfg["batch"]], device=device)

    def step(update=True):
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if update:
            opt.step()
            opt.zero_grad()

    with memory.track(device=device, timeline=False) as first:
        step()
    with memory.track(device=device, timeline=False) as second:
        step()
    step(update=False)  # gradients in place: time the optimizer step alone
    step_seconds = best_time(opt.step, repeats=3)
    params = model.parameters()
    matrices = [p for p in params if p.ndim == 2]
    return {"label": label, "num_parameters": model.num_parameters(), "state_bytes": opt.state_bytes(),
            "ledger_optimizer_bytes": memory.live_bytes("optimizer") - before,
            "formula_bytes": table.expected_state_bytes(opt),
            "matrix_state_bytes": sum(_param_state_bytes(opt, p) for p in matrices),
            "matrix_parameters": sum(p.size for p in matrices),
            "first_step_ledger_delta": first.peak_delta(), "first_step_measured": first.measured_peak(),
            "peak_by_bucket": second.peak_by_bucket(), "peak": second.peak(),
            "step_seconds": step_seconds}


def run(quick=False, device="cpu"):
    cfg = _setup(quick)
    arrays = data.load_digits()
    mem = [_memory(label, cfg, arrays, device) for label in CONFIGS]
    runs, best, noise = _sweep(cfg, arrays, device)
    by_label = {m["label"]: m for m in mem}
    adam, adam8 = best["Adam"], best["Adam8bit"]

    def ratio(run, key):
        return run[key] / adam[key] if run[key] is not None else None

    targets = {
        "adam8bit_state_ratio": by_label["Adam8bit"]["state_bytes"] / by_label["Adam"]["state_bytes"],
        "adam8bit_heldout_loss_ratio": ratio(adam8, "final_heldout"),
        "adam8bit_train_loss_ratio": ratio(adam8, "final_train"),
        "adam_other_data_order_heldout_ratio": ratio(noise, "final_heldout"),
        "adam_other_data_order_train_ratio": ratio(noise, "final_train"),
        "adafactor_matrix_state_ratio": (by_label["Adafactor"]["matrix_state_bytes"]
                                         / by_label["Adam"]["matrix_state_bytes"]),
    }
    return {"config": cfg, "memory": mem, "runs": runs, "adam_other_data_order": noise,
            "tuned": {label: {"lr": r["lr"], "final_heldout": r["final_heldout"],
                              "lr_at_grid_edge": r.get("lr_at_grid_edge", False)}
                      for label, r in best.items()},
            "targets": targets}


def _color(label):
    """One colour per optimizer, the same in every figure (tab20 has room for all of them)."""
    import matplotlib
    return matplotlib.colormaps["tab20"](list(CONFIGS).index(label) % 20)


def _best_runs(records):
    chosen = []
    for label, tuned in records["tuned"].items():
        chosen += [r for r in records["runs"] if r["label"] == label and r["lr"] == tuned["lr"]][:1]
    return chosen


def plot(records, outdir):
    cfg, mem = records["config"], records["memory"]
    model = f"MLP {cfg['sizes']}"
    paths = []

    fig, ax = plots.new_figure(width=8)
    labels = [m["label"] for m in mem]
    per_param = [m["ledger_optimizer_bytes"] / m["num_parameters"] for m in mem]
    formula = [m["formula_bytes"] / m["num_parameters"] for m in mem]
    ax.barh(labels, per_param, color=plots.BUCKET_COLORS["optimizer"], label="ledger")
    ax.scatter(formula, labels, marker="|", s=200, color="k", label="formula (optim/table.py)")
    for y, v in enumerate(per_param):
        ax.text(v + 0.1, y, f"{v:.3g}", va="center", fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("optimizer state bytes per parameter (float32 parameters)")
    ax.set_title(f"Optimizer state after one step, {model}")
    ax.legend(fontsize=7, loc="lower right")
    paths.append(plots.save(fig, records, outdir, FIGURES[0]))

    fig, axes = plots.new_figure(ncols=3, width=5)
    chosen = _best_runs(records)
    for r in chosen:
        train = np.array([np.nan if v is None else v for v in r["train_loss"]])
        window = max(1, len(train) // (4 * cfg["epochs"]))
        smooth = np.convolve(train, np.ones(window) / window, mode="valid")
        axes[0].plot(smooth, lw=1, color=_color(r["label"]), label=f"{r['label']} (lr {r['lr']:g})")
        heldout = [np.nan if v is None else v for v in r["heldout_loss"]]
        axes[1].plot(range(1, len(heldout) + 1), heldout, marker=".", lw=1, color=_color(r["label"]),
                     label=r["label"])
    axes[0].set(xlabel="step", ylabel="train loss (moving average)", yscale="log", ylim=(None, DIVERGED),
                title=f"Digits, {model}, tuned lr each")
    axes[1].set(xlabel="epoch", ylabel="held-out loss", yscale="log", ylim=(None, DIVERGED),
                title="Held-out loss (8-bit: Adam's lr)")
    axes[0].legend(fontsize=6)
    for label in LR_GRIDS:
        sweep = sorted((r["lr"], r["final_heldout"]) for r in records["runs"] if r["label"] == label)
        axes[2].plot([lr for lr, _ in sweep], [DIVERGED if v is None else min(v, DIVERGED) for _, v in sweep],
                     marker="o", ms=3, lw=1, color=_color(label), label=label)
    axes[2].set(xscale="log", yscale="log", xlabel="learning rate", ylabel="final held-out loss",
                title=f"The sweep ({cfg['epochs']} epochs; capped at {DIVERGED:g})")
    axes[2].legend(fontsize=6)
    paths.append(plots.save(fig, records, outdir, FIGURES[1]))

    fig, ax = plots.new_figure(width=8)
    bottom = np.zeros(len(mem))
    for bucket in ("parameter", "gradient", "optimizer", "activation", "workspace"):
        values = np.array([m["peak_by_bucket"][bucket] / 2**20 for m in mem])
        ax.bar(labels, values, bottom=bottom, color=plots.BUCKET_COLORS[bucket], label=bucket)
        bottom += values
    ax.set_ylabel("device MiB at the step's peak (ledger)")
    ax.set_title(f"Memory of one training step by bucket, {model}, batch {cfg['batch']}\n"
                 "(the peak is in the update: workspace = its temporaries; 8-bit: dequantized moments)",
                 fontsize=9)
    ax.tick_params(axis="x", rotation=60, labelsize=7)
    ax.legend(fontsize=7)
    paths.append(plots.save(fig, records, outdir, FIGURES[2]))

    fig, ax = plots.new_figure(width=7)
    state = {m["label"]: m["ledger_optimizer_bytes"] / m["num_parameters"] for m in mem}
    diverged = [r["label"] for r in chosen if r["final_heldout"] is None or r["final_heldout"] > DIVERGED]
    for r in chosen:
        if r["label"] in diverged:
            continue
        ax.scatter(state[r["label"]], r["final_heldout"], s=25, color=_color(r["label"]))
        ax.annotate(r["label"], (state[r["label"]], r["final_heldout"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    ax.set(xlabel="optimizer state bytes per parameter", ylabel="final held-out loss (tuned lr)",
           title=f"Loss against state memory, {model}, {cfg['epochs']} epochs")
    if diverged:
        ax.text(0.99, 0.98, "diverged, not shown: " + ", ".join(diverged), transform=ax.transAxes,
                ha="right", va="top", fontsize=7, color="#c44e52")
    paths.append(plots.save(fig, records, outdir, FIGURES[3]))
    return paths
