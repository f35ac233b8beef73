"""Figures: per-rank memory and traffic of data parallel, ZeRO-1/2/3 and a pipeline, over MPI.

``run`` launches ``mpiexec -n 2`` and ``mpiexec -n 4`` on ``tinymem.distributed.worker measure``
(an MLP in float32 with Adam; one warm-up step, then one tracked step per strategy) and keeps
every rank's ledger at the end of backward, its peak per bucket, the allocator's peak, the
bytes it sent (ring accounting and buffers handed to MPI) and the formula's bytes. Beside them,
the ZeRO paper's table from :mod:`tinymem.distributed.calculator`.

Without mpi4py or mpiexec the records say so and the figures show the formulas only.
"""
import os
import pathlib

from .. import plots
from ..distributed import calculator, launch
from ..distributed.worker import STRATEGIES, parse_result

NAME = "partition"
ORDER = 70
FIGURES = ["partition_memory.png", "partition_traffic.png"]
LABELS = {"dp": "DP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3", "gpipe": "GPipe",
          "1f1b": "1F1B"}
MODEL_BUCKETS = ("parameter", "gradient", "optimizer")


def run(quick=False, device="cpu"):
    sizes = "16,64,64,64,64,8" if quick else "64,256,256,256,256,10"
    batch, micro = (32, 4) if quick else (64, 8)
    records = {"config": {"sizes": sizes, "batch": batch, "micro_batches": micro, "dtype": "float32",
                          "optimizer": "Adam", "ranks": [2, 4]},
               "paper_table": calculator.paper_table(7.5e9, 64), "runs": {}}
    if not launch.mpi_available():
        records["skipped"] = "mpi4py or mpiexec missing: pip install .[dist]"
        return records
    root = str(pathlib.Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    for n in (2, 4):
        out = launch.run(["-m", "tinymem.distributed.worker", "measure", "--sizes", sizes,
                          "--batch", str(batch), "--micro-batches", str(micro), "--device", device],
                         n, timeout=600, env=env, cwd=root).stdout
        records["runs"][str(n)] = parse_result(out)
    return records


def summary(result):
    """Per strategy: the largest rank's bytes relative to data parallel's, traffic vs formula.

    The largest rank is what decides whether a device is big enough (pipeline stages differ).
    """
    per = {}
    for r in result["records"]:
        per.setdefault(r["strategy"], []).append(r)

    def worst(name, fn):
        return max(fn(r) for r in per[name])

    def states(r):
        return sum(r["at_backward_end"][b] for b in MODEL_BUCKETS)

    def optimizer(r):
        return r["optimizer_state_bytes"]

    return {name: {"optimizer_vs_dp": worst(name, optimizer) / worst("dp", optimizer),
                   "model_states_vs_dp": worst(name, states) / worst("dp", states),
                   "traffic_vs_formula": sum(r["sent"] for r in per[name])
                   / sum(r["formula_sent"] for r in per[name]),
                   "activation_peak": worst(name, lambda r: r["max_by_bucket"]["activation"])}
            for name in per}


def plot(records, outdir):
    return [_per_rank_figure(records, outdir, FIGURES[0], _memory_panel, 7.0, 4.4),
            _per_rank_figure(records, outdir, FIGURES[1], _traffic_panel, 6.0, 4.2)]


def _per_rank_figure(records, outdir, name, panel, width, height):
    """One panel per rank count measured; the paper's table alone when MPI was missing."""
    runs = records.get("runs", {})
    ranks = sorted(runs, key=int)
    fig, axes = plots.new_figure(ncols=max(1, len(ranks)), width=width, height=height)
    axes = list(axes) if len(ranks) > 1 else [axes]
    for ax, n in zip(axes, ranks):
        panel(ax, runs[n])
    if not ranks:
        _paper_panel(axes[0], records["paper_table"])
    return plots.save(fig, records, outdir, name)


def _memory_panel(ax, result):
    n = result["world_size"]
    by = {(r["strategy"], r["rank"]): r for r in result["records"]}
    width = 0.8 / n
    for s, name in enumerate(STRATEGIES):
        for rank in range(n):
            r = by[(name, rank)]
            values = [r["at_backward_end"][b] for b in MODEL_BUCKETS] + [r["max_by_bucket"]["activation"]]
            bottom = 0.0
            x = s + (rank - (n - 1) / 2) * width
            for bucket, value in zip(MODEL_BUCKETS + ("activation",), values):
                ax.bar(x, value / 2**10, width * 0.9, bottom=bottom, color=plots.BUCKET_COLORS[bucket],
                       label=bucket if (s, rank) == (0, 0) else None)
                bottom += value / 2**10
    ratio = summary(result)
    for s, name in enumerate(STRATEGIES):
        ax.text(s, ax.get_ylim()[1] * 0.02, f"{ratio[name]['model_states_vs_dp']:.2f}x",
                ha="center", fontsize=7, color="white")
    ax.set_xticks(range(len(STRATEGIES)), [LABELS[s] for s in STRATEGIES])
    ax.set_ylabel("bytes per rank (KiB)")
    ax.set_title(f"{n} ranks, MLP {result['sizes']} ({result['params']:,} params), batch {result['batch']}\n"
                 "model states at the end of backward + activation peak; one bar per rank;\n"
                 "label: largest rank's model states vs data parallel", fontsize=8)
    ax.legend(fontsize=7)


def _traffic_panel(ax, result):
    n = result["world_size"]
    rows = {}
    for r in result["records"]:
        row = rows.setdefault(r["strategy"], {"sent": 0.0, "mpi_sent": 0.0, "formula_sent": 0.0})
        for key in row:
            row[key] += r[key] / n
    xs = range(len(STRATEGIES))
    measured = [rows[s]["sent"] / 2**10 for s in STRATEGIES]
    formula = [rows[s]["formula_sent"] / 2**10 for s in STRATEGIES]
    handed = [rows[s]["mpi_sent"] / 2**10 for s in STRATEGIES]
    ax.bar([x - 0.27 for x in xs], formula, 0.27, color="#bbbbbb", label="formula (ring)")
    ax.bar(list(xs), measured, 0.27, color="#4c72b0", label="measured (ring accounting)")
    ax.bar([x + 0.27 for x in xs], handed, 0.27, color="#8172b3", label="buffers handed to MPI")
    for x, m, f in zip(xs, measured, formula):
        ax.text(x, m, f"{m / f:.3f}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks(list(xs), [LABELS[s] for s in STRATEGIES])
    ax.set_ylabel("bytes sent per step, mean over ranks (KiB)")
    ax.set_title(f"{n} ranks: communication per training step\n(number: measured / formula)", fontsize=9)
    ax.legend(fontsize=7)


def _paper_panel(ax, table):
    ax.bar(range(len(table)), [row["gb"] for row in table], color="#55a868")
    ax.set_xticks(range(len(table)), [row["label"] for row in table], fontsize=7)
    ax.set_ylabel("GB per device")
    ax.set_title("ZeRO paper, 7.5B parameters on 64 devices (formula only: no MPI here)")
