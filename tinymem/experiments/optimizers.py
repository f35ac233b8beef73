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

from .. import data, memory, models, random
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..measure.claims import Claim
from ..measure.timing import best_time
from ..optim import table
from ..optim.adam8bit import Adam8bit
from ..optim.table import CONFIGS
from . import optimizers_plots as figures

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


def train_digits(label, lr, cfg, arrays, device=None, data_seed=0, init_seed=0):
    """Train from initialisation ``init_seed`` with the batches shuffled by ``data_seed``; return
    per-step train losses, per-epoch held-out losses, the last epoch's mean train loss, time."""
    x_train, y_train, x_test, y_test = arrays
    random.manual_seed(init_seed)
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
    # the yardstick for "within noise": every tuned run again with the batches in another order
    noise = {label: train_digits(label, r["lr"], cfg, arrays, device, data_seed=1) for label, r in best.items()}
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
            "map_bytes": opt.map_bytes() if hasattr(opt, "map_bytes") else 0,
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
        # the same without the maps: what grows with the model
        "adam8bit_per_parameter_ratio": ((by_label["Adam8bit"]["state_bytes"] - by_label["Adam8bit"]["map_bytes"])
                                         / by_label["Adam"]["state_bytes"]),
        "adam8bit_map_bytes": by_label["Adam8bit"]["map_bytes"],
        "adam8bit_heldout_loss_ratio": ratio(adam8, "final_heldout"),
        "adam8bit_train_loss_ratio": ratio(adam8, "final_train"),
        "adam_other_data_order_heldout_ratio": ratio(noise["Adam"], "final_heldout"),
        "adam_other_data_order_train_ratio": ratio(noise["Adam"], "final_train"),
        "adafactor_matrix_state_ratio": (by_label["Adafactor"]["matrix_state_bytes"]
                                         / by_label["Adam"]["matrix_state_bytes"]),
    }
    # 8-bit against 32-bit Adam over 3 seeds (initialisation and data order), at Adam's lr: the
    # yardstick is 32-bit Adam's own seed-to-seed spread.
    seeds = {label: [train_digits(label, adam["lr"], cfg, arrays, device, data_seed=s, init_seed=s)["final_heldout"]
                     for s in range(3)] for label in ("Adam", "Adam8bit")}
    targets["seeds_heldout"] = seeds
    tuned = {label: {"lr": r["lr"], "final_heldout": r["final_heldout"],
                     "other_data_order_heldout": noise[label]["final_heldout"],
                     "lr_at_grid_edge": r.get("lr_at_grid_edge", False)} for label, r in best.items()}
    return {"config": cfg, "memory": mem, "runs": runs, "adam_other_data_order": noise["Adam"],
            "tuned": tuned, "targets": targets, "frontier": frontier(mem, tuned)}


def _within_seed_spread(r):
    """(|mean 8-bit - mean 32-bit| / Adam's max - min over seeds, holds)."""
    adam, eight = r["targets"]["seeds_heldout"]["Adam"], r["targets"]["seeds_heldout"]["Adam8bit"]
    if None in adam or None in eight:
        return "a seed diverged", False
    gap = abs(np.mean(eight) - np.mean(adam)) / max(max(adam) - min(adam), 1e-12)
    return gap, gap <= 1


def _both_orders(tuned):
    """The held-out losses of a tuned run in its two data orders (the finite ones)."""
    return [v for v in (tuned["final_heldout"], tuned["other_data_order_heldout"])
            if v is not None and v <= DIVERGED]


def frontier(mem, tuned):
    """The labels on the loss-memory frontier, fewest state bytes first: no other optimizer
    has both fewer (or as few) state bytes per parameter and a lower mean held-out loss over
    the two data orders. Diverged runs are left out."""
    state = {m["label"]: m["ledger_optimizer_bytes"] / m["num_parameters"] for m in mem}
    points = sorted((state[label], float(np.mean(_both_orders(t))), label)
                    for label, t in tuned.items() if _both_orders(t))
    found, best = [], float("inf")
    for _, loss, label in points:
        if loss < best:
            found.append(label)
            best = loss
    return found


def _memory_of(r, label):
    return next(m for m in r["memory"] if m["label"] == label)


def _between_steps(m):
    """Bytes that stay on the device between steps: the weights and the optimizer's state."""
    return 4 * m["num_parameters"] + m["state_bytes"]


def _eight_bit(r):
    adam, adam8 = _memory_of(r, "Adam"), _memory_of(r, "Adam8bit")
    return (adam8["peak"] / adam["peak"],
            adam8["peak"] < adam["peak"] and _between_steps(adam8) < _between_steps(adam))


def _sgd_near_best(r):
    means = {label: np.mean(_both_orders(t)) for label, t in r["tuned"].items() if _both_orders(t)}
    ratio = means["SGD"] / min(means.values())
    return ratio, ratio <= 1.25


CLAIMS = [
    Claim("state_formula", "every optimizer's state: ledger = formula (optim/table.py) = state_bytes()",
          lambda r: (sum(m["ledger_optimizer_bytes"] != m["formula_bytes"] or m["formula_bytes"] != m["state_bytes"]
                         for m in r["memory"]), all(m["ledger_optimizer_bytes"] == m["formula_bytes"] == m["state_bytes"]
                                                    for m in r["memory"]))),
    Claim("adam8bit_quarter", "8-bit Adam's state that grows with the model (codes, block scales, 32-bit small "
          f"tensors) is <= 0.26x of Adam's; its maps (a fixed {Adam8bit.MAP_BYTES // 1024} KiB, the price of "
          "quantizing without a search) come on top",
          lambda r: (r["targets"]["adam8bit_per_parameter_ratio"], r["targets"]["adam8bit_per_parameter_ratio"] <= 0.26),
          modes=("full",)),  # at quick sizes the 32-bit small tensors weigh more
    Claim("adafactor_factored", "Adafactor's state on the weight matrices is < 1% of Adam's",
          lambda r: (r["targets"]["adafactor_matrix_state_ratio"], r["targets"]["adafactor_matrix_state_ratio"] < 0.01)),
    Claim("adam8bit_peak_below_adam", "8-bit Adam's update works chunk by chunk, so its fp32 temporaries are one "
          "chunk's: its step peak is below Adam's, not only its state between steps", _eight_bit,
          modes=("full",)),  # on the quick model the fixed maps outweigh Adam's whole state
    Claim("adam8bit_loss", "8-bit Adam at Adam's lr ends within 10% of Adam's held-out loss",
          lambda r: (r["targets"]["adam8bit_heldout_loss_ratio"],
                     abs(r["targets"]["adam8bit_heldout_loss_ratio"] - 1) <= 0.1), modes=("full",)),
    Claim("adam8bit_within_seed_spread", "over 3 seeds, 8-bit Adam's mean held-out loss is within 32-bit Adam's "
          "seed-to-seed spread (max - min) of Adam's mean", _within_seed_spread, modes=("full",)),
    Claim("lr_bracketed", "every optimizer's tuned lr lies inside its grid, not at an edge",
          lambda r: ([k for k, t in r["tuned"].items() if t["lr_at_grid_edge"]],
                     not any(t["lr_at_grid_edge"] for t in r["tuned"].values())), modes=("full",)),
    Claim("sgd_near_best", "plain SGD's held-out loss is within 25% of the best optimizer's (mean of 2 data orders)",
          _sgd_near_best, modes=("full",)),
]


def plot(records, outdir):
    return figures.plot(records, outdir, FIGURES, list(CONFIGS), LR_GRIDS, DIVERGED)
