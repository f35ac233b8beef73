"""Figures: gradient checkpointing's memory against depth, and its time-memory frontier.

``checkpoint_depth.png``: the activation peak of one training step of an n-block MLP (n = 8 to
256) with no checkpointing (O(n)), sqrt(n) segments (O(sqrt n)) and revolve with 4 slots (O(1)
in n, paid for in recomputation); the ledger's count, and the ledger's growth beside the
allocator's (tracemalloc on NumPy, the CuPy pool on a GPU), read over a second run of the step
outside the ledger's window, whose own records grow with the number of parameter arrays.

``checkpoint_frontier.png``: one 64-block network, every segment count 1..64 and revolve with
several slot counts: step-time ratio against activation-peak ratio (to the plain step), measured
points (ledger) beside the curve predicted from the per-layer profile and the plain step's
forward time; PyTorch's ``checkpoint_sequential`` on the same network and weights, timed in the
same run (its memory: the bytes it saves for backward, followed by saved-tensor hooks).
Its second panel: whole models (a Transformer LM and a U-Net) with no checkpointing, full
recomputation (every block a checkpoint), sqrt(n) segments (the Transformer's chain of blocks)
and selective recomputation (every block a checkpoint that keeps its matmul and convolution
outputs): activation peak and step time against no checkpointing.
Timings: one thread, CPU seconds of the process, interleaved, best of the repeats.
"""
import time

import numpy as np

from .. import plots
from ..measure.claims import Claim
from ..techniques.checkpoint.schedule import predict_revolve, predict_segments, profile_layers
from ..techniques.checkpoint import resolve_segments
from ..techniques.checkpoint.revolve import binomial_forwards
from ..measure.timing import interleaved_samples, interleaved_times, spread
from .checkpoint_nets import (SAVE_MATMULS, batch, deep_mlp, forward, measure_memory, model_activation_peak,
                              one_thread, step, synchronize, torch_activation_peak, torch_step, torch_twin,
                              transformer_problem, unet_problem)

NAME = "checkpoint"
ORDER = 10
FIGURES = ["checkpoint_depth.png", "checkpoint_frontier.png"]
SLOTS = 4
STRATEGIES = {"transformer": ("none", "full recompute", "sqrt(n) segments", "selective"),
              "unet": ("none", "full recompute", "selective")}


def _selective_check(records):
    """Transformer LM: selective's activation reduction and its time overhead / full's, by the
    lower quartiles of the turns (the cost with a core to itself: other jobs only add time)."""
    rows = {r["strategy"]: r for r in records["models"]["transformer"]["rows"]}
    fewer = 1 / rows["selective"]["memory_ratio"]
    none = rows["none"]["step"]["q1"]
    full = rows["full recompute"]["step"]["q1"] - none
    share = (rows["selective"]["step"]["q1"] - none) / full if full > 0 else None
    return {"fewer": fewer, "overhead_share": share, "full_overhead": full}


def _selective_time(records):
    """Selective's overhead over full's, judged only when full recomputation cost time in this
    run: without an overhead to compare with, any share (a negative one too) would 'hold'."""
    check = _selective_check(records)
    if check["overhead_share"] is None:
        return (f"full recomputation showed no overhead in this run (its lower quartile "
                f"{1e3 * check['full_overhead']:+.3g} ms from none's), so there is nothing to be smaller than"), None
    return check["overhead_share"], check["overhead_share"] < 1


def _depth_rows(records, schedule):
    rows = sorted((r for r in records["depth"]["rows"] if r["schedule"] == schedule), key=lambda r: r["depth"])
    return [r["depth"] for r in rows], [r["activation_peak"] for r in rows]


def _loglog_slope(schedule, last_doubling=False):
    """The exponent p of activation peak ∝ n^p: a least-squares fit in log-log over the sweep
    (or the last doubling only, where a constant term no longer matters)."""
    def check(records):
        depths, peaks = _depth_rows(records, schedule)
        if last_doubling:
            depths, peaks = depths[-2:], peaks[-2:]
        return float(np.polyfit(np.log(depths), np.log(peaks), 1)[0])
    return check


def _allocator_rise(records, schedule):
    """The allocator's growth at the deepest depth minus at the shallowest, in bytes."""
    rows = sorted((r for r in records["depth"]["rows"] if r["schedule"] == schedule), key=lambda r: r["depth"])
    return rows[-1]["measured_peak_delta"] - rows[0]["measured_peak_delta"]


def _revolve_allocator_share(records):
    """Revolve's allocator rise over the sweep, as a share of the plain step's."""
    return _allocator_rise(records, f"revolve, {SLOTS} slots") / _allocator_rise(records, "none")


def _ratio_at(records, depth):
    rows = {r["schedule"]: r["activation_peak"] for r in records["depth"]["rows"] if r["depth"] == depth}
    return rows["sqrt(n) segments"] / rows["none"]


CLAIMS = [
    Claim("plain_linear", "without checkpointing the activation peak grows as n (log-log slope of the "
          "last doubling within 1 +- 0.1)",
          lambda r: (_loglog_slope("none", True)(r), abs(_loglog_slope("none", True)(r) - 1) <= 0.1)),
    Claim("segments_sqrt", "with sqrt(n) segments it grows as sqrt(n) (log-log slope of a fit over the "
          "sweep within 0.5 +- 0.15)",
          lambda r: (_loglog_slope("sqrt(n) segments")(r), abs(_loglog_slope("sqrt(n) segments")(r) - 0.5) <= 0.15)),
    Claim("segments_at_64", "at n = 64, sqrt(n) segments keep <= 0.3x the activations of no checkpointing",
          lambda r: (_ratio_at(r, 64), _ratio_at(r, 64) <= 0.3)),
    Claim("revolve_constant", "Revolve with 4 slots keeps the same activation peak at every depth",
          lambda r: (len(set(_depth_rows(r, "revolve, 4 slots")[1])), len(set(_depth_rows(r, "revolve, 4 slots")[1])) == 1)),
    Claim("revolve_allocator_flat", "the allocator (tracemalloc, a run of its own) sees Revolve's growth "
          "nearly constant: from the shallowest depth to the deepest it rises by < 2% of what the plain "
          "step's rises (the share shown; what rises is the ledger's table of live arrays, one slot per "
          "parameter)", lambda r: (_revolve_allocator_share(r), _revolve_allocator_share(r) < 0.02)),
    Claim("selective_bytes", "selective recomputation keeps >= 2x fewer activation bytes than none "
          "on the Transformer LM", lambda r: (_selective_check(r)["fewer"], _selective_check(r)["fewer"] >= 2),
          modes=("full",)),
    Claim("selective_time", "at a smaller time overhead than full recomputation (lower quartiles of turns; "
          "its share of full's shown)",
          _selective_time, modes=("full",)),
]


def _depth_sweep(quick, device):
    width, size = (64, 16) if quick else (256, 64)
    depths = [8, 16, 32, 64] if quick else [8, 16, 32, 64, 128, 256]
    rows = []
    for n in depths:
        model = deep_mlp(n, width, device)
        x, grad = batch(model, size, device)
        for label, mode in (("none", ("none", 0)), ("sqrt(n) segments", ("segments", resolve_segments("sqrt", n))),
                            (f"revolve, {SLOTS} slots", ("revolve", SLOTS))):
            rows.append(dict(depth=n, schedule=label, count=mode[1], **measure_memory(model, x, grad, mode)))
    return {"width": width, "batch": size, "rows": rows}


def _frontier(quick, device):
    depth, width, size = (16, 64, 16) if quick else (64, 256, 64)
    segments = [1, 2, 4, 8, 16] if quick else list(range(1, depth + 1))
    slots = [2, 4, 8] if quick else [2, 3, 4, 6, 8, 12, 16, 24, 32, 64]
    torch_segments = [1, 2, 4, 8, 16] if quick else [1, 2, 4, 8, 16, 32, 64]
    model = deep_mlp(depth, width, device)
    x, grad = batch(model, size, device)
    profile = profile_layers(model, x)
    modes = [("segments", k) for k in segments] + [("revolve", s) for s in slots]
    points = []
    for kind, count in modes:
        predicted = (predict_segments if kind == "segments" else predict_revolve)(profile, x.nbytes, count)
        recomputed = (count - 1) * (depth // count) if kind == "segments" else binomial_forwards(depth, count)
        points.append(dict(kind=kind, count=count, predicted_peak=predicted, recomputed=recomputed,
                           **measure_memory(model, x, grad, (kind, count), measure=False)))
    fns = {f"{p['kind']} {p['count']}": (lambda mode=(p["kind"], p["count"]): step(model, x, grad, mode))
           for p in points}
    fns["forward only"] = lambda: synchronize(forward(model, x, ("none", 0)))
    torch_points = []
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None and device == "cpu":
        twin = torch_twin(model)
        xt, gt = torch.tensor(x.numpy(), requires_grad=True), torch.from_numpy(grad)
        for k in torch_segments:
            torch_points.append(dict(kind="torch segments", count=k,
                                     activation_peak=torch_activation_peak(twin, xt, gt, k)))
            fns[f"torch {k}"] = lambda k=k: torch_step(twin, xt, gt, k)
    times = interleaved_times(fns, repeats=2 if quick else 3, warmup=1,
                              clock=time.process_time if device == "cpu" else time.perf_counter)
    plain_time, plain_peak = times["segments 1"], points[0]["activation_peak"]
    forward_per_layer = times["forward only"] / depth
    for p in points:
        p["step_seconds"] = times[f"{p['kind']} {p['count']}"]
        p["time_ratio"] = p["step_seconds"] / plain_time
        p["memory_ratio"] = p["activation_peak"] / plain_peak
        p["predicted_memory_ratio"] = p["predicted_peak"] / points[0]["predicted_peak"]
        p["predicted_time_ratio"] = 1 + p["recomputed"] * forward_per_layer / plain_time
    for p in torch_points:
        p["step_seconds"] = times[f"torch {p['count']}"]
        p["time_ratio"] = p["step_seconds"] / times["torch 1"]
        p["memory_ratio"] = p["activation_peak"] / torch_points[0]["activation_peak"]
    return {"depth": depth, "width": width, "batch": size, "plain_step_seconds": plain_time,
            "forward_seconds": times["forward only"], "points": points, "torch_points": torch_points}


def _whole_models(quick, device):
    """Activation peak and step time of each strategy on a Transformer LM and a U-Net."""
    out = {}
    for key, make in (("transformer", transformer_problem), ("unet", unet_problem)):
        name, model, loss = make(quick, device)
        strategies = STRATEGIES[key]
        rows = [dict(strategy=s, activation_peak=model_activation_peak(model, loss, s)) for s in strategies]
        # Medians of turns: the selective claim compares two small overheads (a difference of
        # step times over another), which the best-of-few of a shared machine does not resolve.
        samples = interleaved_samples({s: (lambda s=s: loss(s).backward()) for s in strategies},
                                      repeats=2 if quick else 15, warmup=1,
                                      clock=time.process_time if device == "cpu" else time.perf_counter)
        none = spread(samples["none"])["median"]
        for r in rows:
            r["step"] = spread(samples[r["strategy"]])
            r["step_seconds"] = r["step"]["median"]
            r["time_ratio"] = r["step_seconds"] / none
            r["memory_ratio"] = r["activation_peak"] / rows[0]["activation_peak"]
        out[key] = {"model": name, "rows": rows}
    return out


def run(quick=False, device="cpu"):
    # One BLAS thread throughout: on a shared machine a second spinning thread only burns CPU.
    with one_thread():
        return {"config": {"dtype": "float32", "block": "Linear(w, w) -> ReLU", "slots": SLOTS,
                           "selective_policy": list(SAVE_MATMULS),
                           "timing": "one thread, process CPU time, interleaved; best of repeats (depth sweep, "
                                     "frontier), median of 15 turns (whole models)"},
                "depth": _depth_sweep(quick, device), "frontier": _frontier(quick, device),
                "models": _whole_models(quick, device)}


_STYLE = {"none": ("#c44e52", "o"), "sqrt(n) segments": ("#4c72b0", "s")}


def _plot_depth(records, outdir):
    data = records["depth"]
    fig, (ax_act, ax_meas) = plots.new_figure(ncols=2, width=5.6)
    schedules = list(dict.fromkeys(r["schedule"] for r in data["rows"]))
    for label in schedules:
        rows = [r for r in data["rows"] if r["schedule"] == label]
        color, marker = _STYLE.get(label, ("#55a868", "^"))
        depths = [r["depth"] for r in rows]
        ax_act.plot(depths, [r["activation_peak"] / 2**20 for r in rows], marker=marker, color=color, label=label)
        ax_meas.plot(depths, [r["ledger_peak_delta"] / 2**20 for r in rows], marker=marker, color=color,
                     label=f"{label}: ledger")
        measured = [r["measured_peak_delta"] for r in rows]
        if all(m is not None for m in measured):
            ax_meas.plot(depths, [m / 2**20 for m in measured], marker=marker, color=color, ls="--",
                         mfc="none", label=f"{label}: measured")
    # Reference slopes through the smallest depth's points: what O(n) and O(sqrt n) look like here.
    for schedule, power, text in (("none", 1.0, "∝ n"), ("sqrt(n) segments", 0.5, "∝ √n")):
        rows = sorted((r for r in data["rows"] if r["schedule"] == schedule), key=lambda r: r["depth"])
        if rows:
            n0, y0 = rows[0]["depth"], rows[0]["activation_peak"] / 2**20
            ns = [r["depth"] for r in rows]
            ax_act.plot(ns, [y0 * (n / n0) ** power for n in ns], color="#777777", ls=":", lw=1,
                        label="reference slopes: ∝ n, ∝ √n" if schedule == "none" else None)
            ax_act.annotate(text, (ns[-1], y0 * (ns[-1] / n0) ** power), fontsize=8, color="#555555",
                            xytext=(-16, 6), textcoords="offset points")
    for ax in (ax_act, ax_meas):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("depth n (Linear -> ReLU blocks)")
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3, which="both")
    low, high = ax_act.get_ylim()
    ax_act.set_ylim(low, high * 1.6)  # room above the ∝ n line's end for its label (it was cut off)
    ax_act.set_ylabel("activation peak (MiB, ledger)")
    ax_act.set_title(f"Activation peak vs depth (width {data['width']}, batch {data['batch']})", fontsize=9)
    ax_meas.set_ylabel("peak growth during the step (MiB)")
    ax_meas.set_title("Ledger growth (solid) vs allocator growth (dashed)", fontsize=9)
    return plots.save(fig, records, outdir, FIGURES[0])


def _plot_frontier(records, outdir):
    data = records["frontier"]
    fig, (ax, ax_models) = plots.new_figure(ncols=2, width=6.4, height=4.8)
    labels = []
    for kind, color, marker in (("segments", "#4c72b0", "o"), ("revolve", "#55a868", "^")):
        pts = sorted((p for p in data["points"] if p["kind"] == kind), key=lambda p: p["predicted_memory_ratio"])
        name = "segments k" if kind == "segments" else "revolve, s slots"
        ax.plot([p["predicted_memory_ratio"] for p in pts], [p["predicted_time_ratio"] for p in pts],
                color=color, lw=1, alpha=0.7, label=f"{name}: predicted")
        ax.scatter([p["memory_ratio"] for p in pts], [p["time_ratio"] for p in pts], color=color,
                   marker=marker, s=18, label=f"{name}: measured", zorder=3)
        # A few labels only (the segment counts crowd into one corner), placed once all is drawn.
        labelled = (2, 8, 64) if kind == "segments" else (2, 4, 8, 16)  # s=64 sits under PyTorch k=64
        labels += [(f"{'k' if kind == 'segments' else 's'}={p['count']}", (p["memory_ratio"], p["time_ratio"]), color)
                   for p in pts if p["count"] in labelled]
    if data["torch_points"]:
        tp = data["torch_points"]
        last = max(tp, key=lambda p: p["count"])["count"]
        # Said in the legend, below the axes: a note inside them landed on a point at some sizes.
        ax.scatter([p["memory_ratio"] for p in tp], [p["time_ratio"] for p in tp], facecolors="none",
                   edgecolors="#dd8452", marker="D", s=40,
                   label=f"PyTorch checkpoint_sequential (same k;\nat k={last} every block is recomputed,\n"
                         f"{last - 1} nested backwards)")
    ax.set_xscale("log")
    ax.set_xlabel("activation peak / plain step")
    ax.set_ylabel("step time / plain step")
    ax.set_title(f"Time-memory frontier: {data['depth']} blocks, width {data['width']}, "
                 f"batch {data['batch']}", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    # Below the axes: the points fill every corner at one size or another.
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2)
    plots.label_points(ax, labels)
    _plot_models(ax_models, records.get("models", {}))
    return plots.save(fig, records, outdir, FIGURES[1])


_STRATEGY_COLORS = {"none": "#8c8c8c", "full recompute": "#c44e52", "sqrt(n) segments": "#4c72b0",
                    "selective": "#55a868"}


def _plot_models(ax, models):
    """Whole models: each strategy's activation peak and step time relative to none."""
    labels = []
    for (key, data), marker in zip(models.items(), ("o", "s")):
        none = data["rows"][0]["step_seconds"]
        for r in data["rows"]:
            ax.scatter(r["memory_ratio"], r["time_ratio"], color=_STRATEGY_COLORS[r["strategy"]],
                       marker=marker, s=36, zorder=3)
            if "step" in r:  # the interquartile range of the turns, relative to none's median
                low, high = r["step"]["q1"] / none, r["step"]["q3"] / none
                ax.errorbar(r["memory_ratio"], r["time_ratio"], color=_STRATEGY_COLORS[r["strategy"]],
                            yerr=[[r["time_ratio"] - low], [high - r["time_ratio"]]], lw=1, capsize=2)
            label = (r["strategy"], (r["memory_ratio"], r["time_ratio"]), "#222222")
            if label not in labels:  # "none" is (1, 1) for every model: one label
                labels.append(label)
        ax.scatter([], [], color="#444444", marker=marker, label=data["model"])
    ax.set_xscale("log")
    ax.set_xlabel("activation peak / no checkpointing")
    ax.set_ylabel("step time / no checkpointing (median, IQR)")
    ax.set_title("Whole models: full, sqrt(n) and selective recomputation", fontsize=9)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # any corner may hold a point
    plots.label_points(ax, labels)


def plot(records, outdir):
    return [_plot_depth(records, outdir), _plot_frontier(records, outdir)]
