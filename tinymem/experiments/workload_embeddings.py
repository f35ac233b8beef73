"""Figure: bytes per bucket of a recommender with large embedding tables, three ways.

An embedding-bag recommender (two tables, 16 features per row, an MLP on top) trained on
synthetic click logs. Almost every byte is a table row. Each configuration trains the same
model from the same seed on the same batches:

- dense gradients + Adam: a full-table gradient (4·R·D) and two full-table moments (8·R·D);
- dense gradients + row-wise Adagrad: the state shrinks to one float per row (4·R);
- sparse gradients + row-wise Adagrad: the gradient shrinks to the touched rows too.

The MLP is trained with Adam in all three (its bytes are negligible). First each configuration
alone, tracked: each bucket's highest value over a few steps (the ledger) and the allocator's
peak growth (tracemalloc). Then the three train side by side, one step each in turns, so that
their step times (CPU time: median and interquartile range) meet the same load; the held-out loss is
recorded along the way against the chance level (the labels' entropy).
"""
import time

import numpy as np

from .. import data, memory, models, optim, plots, random
from .. import functional as F
from ..autograd import Tensor, no_grad
from ..measure.claims import IN_TURNS, Claim, slower_in_turns
from ..measure.timing import one_blas_thread, spread

NAME = "workload_embeddings"
ORDER = 62
FIGURES = ["workload_embeddings.png"]

CONFIGS = {"dense + Adam": (False, "adam"),
           "dense + row-wise Adagrad": (False, "rowwise"),
           "sparse + row-wise Adagrad": (True, "rowwise")}
COLORS = {"dense + Adam": "#c44e52", "dense + row-wise Adagrad": "#dd8452", "sparse + row-wise Adagrad": "#4c72b0"}


def _build(label, table_sizes, device):
    sparse, table_opt = CONFIGS[label]
    random.manual_seed(0)
    model = models.Recommender(table_sizes, embedding_dim=16, hidden=64, sparse=sparse, device=device)
    opts = [optim.Adam(model.dense_parameters(), lr=1e-2)]
    opts.append(optim.Adam(model.table_parameters(), lr=1e-2) if table_opt == "adam"
                else optim.RowWiseAdagrad(model.table_parameters(), lr=0.1))
    return model, opts


def _step(model, opts, bags, labels, idx, device):
    for opt in opts:
        opt.zero_grad()
    loss = F.cross_entropy(model([b[idx] for b in bags]), Tensor(labels[idx], device=device))
    loss.backward()
    for opt in opts:
        opt.step()


def _test_loss(model, test, device):
    with no_grad():
        return F.cross_entropy(model(test[0]), Tensor(test[1], device=device)).item()


def _memory(label, table_sizes, bags, labels, steps, batch, device):
    """Each bucket's highest value over ``steps`` steps of one configuration, alone."""
    model, opts = _build(label, table_sizes, device)
    rng = np.random.default_rng(0)
    with memory.track(device=device) as t:
        for _ in range(steps):
            _step(model, opts, bags, labels, rng.integers(0, len(labels), batch), device)
    table_grad = model.tables[0].weight.grad.data
    return {"config": label, "max_by_bucket": t.max_by_bucket(), "peak": t.peak(),
            "peak_delta": t.peak_delta(), "measured_peak": t.measured_peak(),
            "table_grad_bytes": int(table_grad.nbytes), "optimizer_bytes": sum(o.state_bytes() for o in opts),
            "table_bytes": sum(p.nbytes for p in model.table_parameters()),
            "table_rows": sum(table_sizes)}


def _train_in_turns(table_sizes, bags, labels, test, steps, batch, device, log_every):
    """All configurations side by side on the same batches, one step each per turn: per-step
    times (the first two, which create the state, left out) and held-out loss curves."""
    runs = {label: _build(label, table_sizes, device) for label in CONFIGS}
    times = {label: [] for label in CONFIGS}
    curves = {label: [{"step": 0, "test_loss": _test_loss(runs[label][0], test, device)}] for label in CONFIGS}
    rng = np.random.default_rng(0)
    with one_blas_thread():
        for step in range(1, steps + 1):
            idx = rng.integers(0, len(labels), batch)
            for label, (model, opts) in runs.items():
                start = time.process_time()  # CPU time: other jobs on a shared machine do not count
                _step(model, opts, bags, labels, idx, device)
                if step > 2:
                    times[label].append(time.process_time() - start)
                if step % log_every == 0 or step == steps:
                    curves[label].append({"step": step, "test_loss": _test_loss(model, test, device)})
    return times, curves


def run(quick=False, device="cpu"):
    table_sizes = (200_000, 20_000) if quick else (1_000_000, 100_000)
    steps, batch, bag = (12, 256, 8) if quick else (100, 256, 8)
    bags, labels = data.synthetic_clicks(20_000 if quick else 100_000, table_sizes, bag, seed=0)
    test_bags, test_labels = data.synthetic_clicks(2_000, table_sizes, bag, seed=1)
    points = [_memory(label, table_sizes, bags, labels, 3, batch, device) for label in CONFIGS]
    times, curves = _train_in_turns(table_sizes, bags, labels, (test_bags, test_labels), steps, batch, device,
                                    log_every=4 if quick else 10)
    for p in points:
        p["step_samples"] = times[p["config"]]
        p["seconds_per_step"] = spread(times[p["config"]])["median"]
        p["curve"] = curves[p["config"]]
        p["test_loss"] = curves[p["config"]][-1]["test_loss"]
    share = float(np.mean(test_labels))
    entropy = float(-(share * np.log(share) + (1 - share) * np.log(1 - share)))
    return {"config": {"table_sizes": list(table_sizes), "embedding_dim": 16, "hidden": 64,
                       "batch": batch, "bag_size": bag, "steps": steps, "dtype": "float32",
                       "label_entropy": entropy, "blas_threads": 1},
            "points": points}


def _point(r, label):
    return next(p for p in r["points"] if p["config"] == label)


def _ratio_claim(value, target, tolerance):
    return value, abs(value / target - 1) <= tolerance


def _learns(r):
    below = r["config"]["label_entropy"] - max(p["test_loss"] for p in r["points"])
    return below, below > 0


def _same_arithmetic(r):
    dense, sparse = _point(r, "dense + row-wise Adagrad"), _point(r, "sparse + row-wise Adagrad")
    gap = max(abs(a["test_loss"] - b["test_loss"]) for a, b in zip(dense["curve"], sparse["curve"]))
    return gap, gap < 1e-4


def _sparse_faster(r):
    dense, sparse = _point(r, "dense + row-wise Adagrad"), _point(r, "sparse + row-wise Adagrad")
    return slower_in_turns(dense["step_samples"], sparse["step_samples"])


CLAIMS = [
    Claim("adam_state_two_tables", "dense + Adam keeps two full-table moments: state = 2x the tables' bytes (+-1%)",
          lambda r: (lambda p: _ratio_claim(p["optimizer_bytes"] / p["table_bytes"], 2, 0.01))(_point(r, "dense + Adam"))),
    Claim("rowwise_one_float_per_row", "row-wise Adagrad keeps one float per table row (+-5%, the MLP's Adam beside it)",
          lambda r: (lambda p: _ratio_claim(p["optimizer_bytes"] / (4 * p["table_rows"]), 1, 0.05))
          (_point(r, "dense + row-wise Adagrad"))),
    Claim("sparse_gradient", "sparse gradients hold only the touched rows: < 1% of the tables' bytes",
          lambda r: (lambda p: (lambda v: (v, v < 0.01))(p["max_by_bucket"]["gradient"] / p["table_bytes"]))
          (_point(r, "sparse + row-wise Adagrad")), modes=("full",)),
    Claim("sparse_peak", "sparse + row-wise Adagrad peaks at <= 0.25x the bytes of dense + Adam",
          lambda r: (lambda v: (v, v <= 0.25))(_point(r, "sparse + row-wise Adagrad")["peak"] / _point(r, "dense + Adam")["peak"])),
    Claim("all_learn", "all three end with a held-out loss below chance (the labels' entropy)", _learns),
    Claim("sparse_is_dense_arithmetic", "sparse and dense row-wise Adagrad learn the same (losses within 1e-4 all along)",
          _same_arithmetic),
    Claim("sparse_faster", "with the same optimizer (row-wise Adagrad), sparse gradients make the step faster than "
          f"dense ones, {IN_TURNS}", _sparse_faster, modes=("full",)),
]


def plot(records, outdir):
    fig, axes = plots.new_figure(ncols=2, nrows=2, width=5.0, height=3.8)
    ax, ax_alloc, ax_time, ax_loss = axes
    points, mib = records["points"], 2.0 ** 20
    xs = np.arange(len(points))
    names = [p["config"].replace(" + ", "\n+ ") for p in points]
    bottom = np.zeros(len(points))
    for bucket in memory.BUCKETS:
        vals = np.array([p["max_by_bucket"][bucket] / mib for p in points])
        ax.bar(xs, vals, bottom=bottom, color=plots.BUCKET_COLORS[bucket], label=bucket, width=0.6)
        bottom += vals
    for x, p in zip(xs, points):
        ax.text(x, bottom[x] * 1.02, f"{p['peak'] / mib:.0f} MiB peak", ha="center", va="bottom", fontsize=plots.MIN_FONT)
    ax.set_ylim(0, bottom.max() * 1.15)
    ax.set_xticks(xs, names)
    ax.set_ylabel(f"{plots.device_label(records)} MiB")
    cfg = records["config"]
    ax.set_title(f"each bucket's maximum over the steps (ledger)\ntables {' + '.join(f'{r:,d}' for r in cfg['table_sizes'])} "
                 f"rows x {cfg['embedding_dim']}")
    ax.legend(loc="upper right", reverse=True)
    ax_alloc.bar(xs - 0.2, [p["peak"] / mib for p in points], 0.4, color="#4c72b0", label="ledger: peak")
    ax_alloc.bar(xs + 0.2, [p["measured_peak"] / mib for p in points], 0.4, color="#8172b3",
                 label="allocator: growth (tables were there before)")
    ax_alloc.set_xticks(xs, names)
    ax_alloc.set_ylim(0, max(max(p["peak"], p["measured_peak"]) for p in points) / mib * 1.35)
    ax_alloc.set_ylabel("MiB")
    ax_alloc.set_title("ledger peak and allocator growth")
    ax_alloc.legend(loc="upper right")
    stats = plots.timing_bars(ax_time, xs, [p["step_samples"] for p in points], 0.6, [COLORS[p["config"]] for p in points])
    for x, s in zip(xs, stats):
        ax_time.text(x, s["q3"] * 1e3 * 1.03 + 1, f"{s['median'] * 1e3:.0f} ms", ha="center", va="bottom",
                     fontsize=plots.MIN_FONT)
    ax_time.set_ylim(0, max(s["q3"] for s in stats) * 1e3 * 1.25 + 2)
    ax_time.set_xticks(xs, names)
    ax_time.set_ylabel("CPU ms per step (median, IQR)")
    ax_time.set_title(f"time per step, in turns, 1 BLAS thread ({len(points[0]['step_samples'])} steps each)")
    for p in points:
        ax_loss.plot([c["step"] for c in p["curve"]], [c["test_loss"] for c in p["curve"]], "o-", ms=3,
                     color=COLORS[p["config"]], label=p["config"], lw=2.5 if "dense" in p["config"] else 1.2)
    ax_loss.axhline(cfg["label_entropy"], color="k", ls="--", lw=1, label=f"chance (label entropy {cfg['label_entropy']:.3f})")
    losses = [c["test_loss"] for p in points for c in p["curve"]] + [cfg["label_entropy"]]
    ax_loss.set_ylim(min(losses) - 0.01, max(losses) + 0.025)
    ax_loss.set_xlabel("training step")
    ax_loss.set_ylabel("held-out cross-entropy (nats)")
    ax_loss.set_title(f"learning, batch {cfg['batch']}, {cfg['bag_size']} ids per bag")
    ax_loss.legend(loc="upper right")
    note = ("What to see: dense gradients and Adam's moments triple the tables' bytes; row-wise Adagrad drops the "
            "moments and sparse gradients drop the full-table gradient, leaving the tables alone, and the step is "
            "faster too. Sparse and dense row-wise Adagrad are the same arithmetic (their curves coincide); Adam at "
            "lr 1e-2 moves the rows more slowly. The clicks' signal lives mostly in rare items, which a short run "
            "barely visits, so every loss stays close to chance (dashed).")
    return [plots.save(fig, records, outdir, FIGURES[0], note=note)]
