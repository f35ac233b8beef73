"""Figure: bytes per bucket of a recommender with large embedding tables, three ways.

An embedding-bag recommender (two tables, 16 features per row, an MLP on top) trained on
synthetic click logs. Almost every byte is a table row. Each configuration trains the same
model from the same seed for the same steps:

- dense gradients + Adam: a full-table gradient (4·R·D) and two full-table moments (8·R·D);
- dense gradients + row-wise Adagrad: the state shrinks to one float per row (4·R);
- sparse gradients + row-wise Adagrad: the gradient shrinks to the touched rows too.

The MLP is trained with Adam in all three (its bytes are negligible). Bars are each bucket's
highest value over the steps (the ledger); the allocator's peak growth over the steps
(tracemalloc) and the time per step are recorded beside them, and the held-out loss shows
that the cheap configurations still learn.
"""
import time

import numpy as np

from .. import data, memory, models, optim, plots, random
from .. import functional as F
from ..autograd import Tensor, no_grad

NAME = "workload_embeddings"
ORDER = 62
FIGURES = ["workload_embeddings.png"]

CONFIGS = {"dense + Adam": (False, "adam"),
           "dense + row-wise Adagrad": (False, "rowwise"),
           "sparse + row-wise Adagrad": (True, "rowwise")}


def _train(label, table_sizes, bags, labels, test, steps, batch, device):
    sparse, table_opt = CONFIGS[label]
    random.manual_seed(0)
    model = models.Recommender(table_sizes, embedding_dim=16, hidden=64, sparse=sparse, device=device)
    opts = [optim.Adam(model.dense_parameters(), lr=1e-2)]
    opts.append(optim.Adam(model.table_parameters(), lr=1e-2) if table_opt == "adam"
                else optim.RowWiseAdagrad(model.table_parameters(), lr=0.1))
    rng = np.random.default_rng(0)
    times = []
    with memory.track(device=device) as t:
        for _ in range(steps):
            idx = rng.integers(0, len(labels), batch)
            start = time.perf_counter()
            for opt in opts:
                opt.zero_grad()
            loss = F.cross_entropy(model([b[idx] for b in bags]), Tensor(labels[idx], device=device))
            loss.backward()
            for opt in opts:
                opt.step()
            del loss
            times.append(time.perf_counter() - start)
    with no_grad():
        test_bags, test_labels = test
        test_loss = F.cross_entropy(model(test_bags), Tensor(test_labels, device=device)).item()
    table_grad = model.tables[0].weight.grad.data
    return {"config": label, "max_by_bucket": t.max_by_bucket(), "peak": t.peak(),
            "peak_delta": t.peak_delta(), "measured_peak": t.measured_peak(),
            "seconds_per_step": float(np.median(times[1:] if steps > 1 else times)),
            "test_loss": test_loss, "table_grad_bytes": int(table_grad.nbytes),
            "optimizer_bytes": sum(o.state_bytes() for o in opts)}


def run(quick=False, device="cpu"):
    table_sizes = (200_000, 20_000) if quick else (1_000_000, 100_000)
    steps, batch, bag = (5, 256, 8) if quick else (100, 256, 8)
    bags, labels = data.synthetic_clicks(20_000 if quick else 100_000, table_sizes, bag, seed=0)
    test_bags, test_labels = data.synthetic_clicks(2_000, table_sizes, bag, seed=1)
    points = [_train(label, table_sizes, bags, labels, (test_bags, test_labels), steps, batch, device)
              for label in CONFIGS]
    base = float(-(np.mean(test_labels) * np.log(np.mean(test_labels))
                   + (1 - np.mean(test_labels)) * np.log(1 - np.mean(test_labels))))
    for p in points:
        print(f"{p['config']:<28} peak {memory.format_bytes(p['peak']):>11}  "
              f"gradient {memory.format_bytes(p['max_by_bucket']['gradient']):>11}  "
              f"optimizer {memory.format_bytes(p['max_by_bucket']['optimizer']):>11}  "
              f"{p['seconds_per_step'] * 1e3:.1f} ms/step  test loss {p['test_loss']:.3f}")
    return {"config": {"table_sizes": list(table_sizes), "embedding_dim": 16, "hidden": 64,
                       "batch": batch, "bag_size": bag, "steps": steps, "dtype": "float32",
                       "label_entropy": base},
            "points": points}


def plot(records, outdir):
    fig, (ax, ax_side) = plots.new_figure(ncols=2, width=5.2, height=4.4)
    points, mib = records["points"], 2.0 ** 20
    xs = np.arange(len(points))
    bottom = np.zeros(len(points))
    for bucket in memory.BUCKETS:
        vals = np.array([p["max_by_bucket"][bucket] / mib for p in points])
        ax.bar(xs, vals, bottom=bottom, color=plots.BUCKET_COLORS[bucket], label=bucket, width=0.6)
        bottom += vals
    ax.plot(xs, [p["peak"] / mib for p in points], "k_", markersize=30, mew=2, label="ledger peak")
    for x, p in zip(xs, points):
        ax.text(x, bottom[x] * 1.01, f"{p['peak'] / mib:.0f} MiB", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(xs)
    ax.set_xticklabels([p["config"].replace(" + ", "\n+ ") for p in points], fontsize=7)
    ax.set_ylabel("MiB (each bucket's maximum over the steps)")
    cfg = records["config"]
    ax.set_title(f"recommender, tables {' + '.join(f'{r:,d}' for r in cfg['table_sizes'])} rows x "
                 f"{cfg['embedding_dim']}\nbatch {cfg['batch']}, {cfg['bag_size']} ids per bag, float32",
                 fontsize=8)
    ax.legend(fontsize=7, loc="upper right")
    ax_side.bar(xs - 0.2, [p["measured_peak"] / mib for p in points], 0.4, color="#8172b3",
                label="measured peak growth (MiB)")
    ax_side.bar(xs + 0.2, [p["seconds_per_step"] * 1e3 for p in points], 0.4, color="#937860",
                label="time per step (ms)")
    ax_side.set_xticks(xs)
    ax_side.set_xticklabels([p["config"].replace(" + ", "\n+ ") + f"\ntest loss {p['test_loss']:.3f}"
                             for p in points], fontsize=7)
    ax_side.set_title(f"allocator growth over {cfg['steps']} steps, time per step, held-out loss\n"
                      f"(label entropy {cfg['label_entropy']:.3f})", fontsize=8)
    ax_side.legend(fontsize=7)
    return [plots.save(fig, records, outdir, FIGURES[0])]
