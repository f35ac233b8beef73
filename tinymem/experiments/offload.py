"""Figures: what offload does to device memory over a step, and what it costs in time.

``offload_timeline.png``: device memory over one Adam step of an MLP with no offload, with the
saved activations offloaded to disk (prefetch 2), and with the layers streamed from the host
(optimizer state and update on the host too).

``offload_tradeoff.png``: step time against device peak for no offload, host, disk and disk
with prefetch, beside the time *predicted* from the bytes each mode moved and the bandwidths
measured in the same run (memcpy for host; disk write and read for disk, with every file flushed
and evicted from the page cache so that the reads hit the disk itself). The prediction assumes
nothing overlaps; prefetch should beat it by the read time it hides behind backward.
"""
import contextlib
import tempfile
import time

import numpy as np

from .. import functional as F
from .. import memory, models, optim, plots, random
from ..autograd import tensor
from ..techniques import offload

NAME = "offload"
ORDER = 40
FIGURES = ["offload_timeline.png", "offload_tradeoff.png"]
PAGE_CACHE = False  # every file flushed and evicted: the reads hit the disk itself
MODES = ("none", "host", "disk", "disk+prefetch")
MODE_COLORS = {"none": "#4c72b0", "host": "#55a868", "disk": "#c44e52", "disk+prefetch": "#8172b2"}


def config(quick):
    """Narrow layers and a large batch: many saved bytes per flop, so transfers show."""
    if quick:
        return {"sizes": [128] + [256] * 4 + [10], "batch": 512, "repeats": 3}
    return {"sizes": [256] + [384] * 8 + [10], "batch": 2048, "repeats": 11}


def make_problem(cfg, device):
    random.manual_seed(0)
    model = models.MLP(cfg["sizes"], activation="tanh").to(device)
    rng = np.random.default_rng(0)
    x = tensor(rng.standard_normal((cfg["batch"], cfg["sizes"][0])).astype(np.float32), device=device)
    y = tensor(rng.integers(0, cfg["sizes"][-1], cfg["batch"]), device=device)
    return model, x, y


def activation_context(mode, directory):
    """The saved-tensor context of one mode (a fresh one per step)."""
    if mode == "none":
        return contextlib.nullcontext()
    if mode == "host":
        return offload.save_on_host(prefetch=0)
    return offload.save_on_disk(directory, prefetch=2 if mode == "disk+prefetch" else 0,
                                page_cache=PAGE_CACHE)


def saved_sizes(model, x, y):
    """The bytes of each array the step's forward saves: what activation offload moves."""
    return offload.saved_schedule(lambda: F.cross_entropy(model(x), y))


def train_step(model, opt, x, y, ctx):
    opt.zero_grad()
    with ctx:
        loss = F.cross_entropy(model(x), y)
        loss.backward()
    opt.step()
    return ctx


def _timeline_run(cfg, device, kind, directory):
    model, x, y = make_problem(cfg, device)
    net, opt, extra = model, optim.Adam(model.parameters(), lr=1e-3), {}
    if kind == "layer streaming":
        net = offload.stream_layers(model, "host")
        opt = offload.offload_optimizer(opt, "host")
    ctx = activation_context("disk+prefetch" if kind == "activation offload" else "none", directory)
    resident = memory.live_bytes("parameter")  # other models' parameters, not this step's
    with memory.track(device=device) as t:
        memory.mark("forward")
        train_step(net, opt, x, y, ctx)
    if kind == "layer streaming":
        layer = [sum(p.nbytes for p in m.parameters()) for m in model if m.parameters()]
        extra = {"param_peak": t.max_by_bucket()["parameter"] - resident, "layer_bytes": layer,
                 "two_layer_bound": max(a + b for a, b in zip(layer, layer[1:])), "stream": net.stats()}
        net.close()
        opt.close()
    return dict(kind=kind, timeline=t.timeline(), peak=t.peak(), peak_by_bucket=t.peak_by_bucket(),
                measured_peak=t.measured_peak(), peak_delta=t.peak_delta(), **extra)


def measure_modes(cfg, device, directory):
    """Device peak, bytes moved and I/O stall per mode, then step times and bandwidths measured
    in alternation (best of each), so that drift on a shared machine hits all alike."""
    model, x, y = make_problem(cfg, device)
    opt = optim.SGD(model.parameters(), lr=1e-3)
    rows = {}
    for mode in MODES:
        with memory.track(device=device) as t:
            ctx = train_step(model, opt, x, y, activation_context(mode, directory))
        stats = ctx.stats() if mode != "none" else {"bytes_out": 0, "bytes_in": 0, "wait_s": 0.0, "write_wait_s": 0.0}
        rows[mode] = {"mode": mode, "peak": t.peak(), "peak_delta": t.peak_delta(),
                      "measured_peak": t.measured_peak(), "max_by_bucket": t.max_by_bucket(),
                      "bytes_out": stats["bytes_out"], "bytes_in": stats["bytes_in"],
                      "read_wait_s": stats["wait_s"], "write_wait_s": stats["write_wait_s"]}
    sizes = saved_sizes(model, x, y)
    samples = {mode: [] for mode in MODES}
    bandwidths = {}
    for _ in range(cfg["repeats"]):
        for mode in MODES:
            start = time.perf_counter()
            train_step(model, opt, x, y, activation_context(mode, directory))
            samples[mode].append(time.perf_counter() - start)
        bw = offload.measure_bandwidths(directory=directory, repeats=1, device=device,
                                        page_cache=PAGE_CACHE, sizes=sizes)
        bandwidths = {k: max(v, bandwidths.get(k, 0)) for k, v in bw.items()}
    for mode in MODES:
        rows[mode]["samples"] = samples[mode]
    return rows, {mode: min(v) for mode, v in samples.items()}, bandwidths


def run(quick=False, device="cpu"):
    cfg = config(quick)
    directory = tempfile.gettempdir()
    timelines = [_timeline_run(cfg, device, kind, directory)
                 for kind in ("no offload", "activation offload", "layer streaming")]
    rows, times, bandwidths = measure_modes(cfg, device, directory)
    for mode, row in rows.items():
        row["seconds"] = times[mode]
        place = {"none": None, "host": "host"}.get(mode, "disk")
        row["predicted_seconds"] = (times["none"] if place is None else offload.predicted_seconds(
            times["none"], row["bytes_out"], row["bytes_in"], bandwidths, place))
        row["ratio_to_predicted"] = row["seconds"] / row["predicted_seconds"]
    # Best against best, and the median of the ratios of neighbouring runs (robust to a noisy,
    # shared machine: both runs of a pair see about the same load).
    pairs = sorted(a / b for a, b in zip(rows["disk+prefetch"]["samples"], rows["disk"]["samples"]))
    targets = {"disk_over_predicted": rows["disk"]["ratio_to_predicted"],
               "prefetch_over_disk": rows["disk+prefetch"]["seconds"] / rows["disk"]["seconds"],
               "prefetch_over_disk_median_pair": pairs[len(pairs) // 2],
               "io_stall_saved_s": (rows["disk"]["read_wait_s"] + rows["disk"]["write_wait_s"]
                                    - rows["disk+prefetch"]["read_wait_s"] - rows["disk+prefetch"]["write_wait_s"]),
               "stream_param_peak_over_two_layers":
                   timelines[2]["param_peak"] / timelines[2]["two_layer_bound"]}
    return {"config": dict(cfg, optimizer_timeline="Adam", optimizer_tradeoff="SGD", activation="tanh",
                           page_cache=PAGE_CACHE, directory=directory),
            "timelines": timelines, "modes": [rows[m] for m in MODES], "bandwidths": bandwidths,
            "targets": targets}


def plot(records, outdir):
    return [_plot_timeline(records, outdir), _plot_tradeoff(records, outdir)]


def _plot_timeline(records, outdir):
    runs = records["timelines"]
    fig, axes = plots.new_figure(ncols=len(runs), width=4.6, height=3.8)
    cfg = records["config"]
    top = max(r["peak"] for r in runs) / 2**20 * 1.15
    for ax, r in zip(axes, runs):
        plots.stacked_timeline(ax, r["timeline"], f"{r['kind']}\npeak {r['peak'] / 2**20:.1f} MiB")
        ax.set_ylim(0, top)
        ax.title.set_fontsize(9)
    fig.suptitle(f"Device memory over one Adam step: MLP {cfg['sizes']}, batch {cfg['batch']}", fontsize=10)
    return plots.save(fig, records, outdir, FIGURES[0])


def _plot_tradeoff(records, outdir):
    fig, (ax, bx) = plots.new_figure(ncols=2, width=5.4, height=4.0)
    rows = records["modes"]
    for r in rows:
        c = MODE_COLORS[r["mode"]]
        ax.scatter(r["peak"] / 2**20, r["seconds"] * 1e3, color=c, s=50, label=f"{r['mode']} (measured)", zorder=3)
        ax.scatter(r["peak"] / 2**20, r["predicted_seconds"] * 1e3, facecolors="none", edgecolors=c, s=70, zorder=3)
        ax.plot([r["peak"] / 2**20] * 2, [r["seconds"] * 1e3, r["predicted_seconds"] * 1e3], color=c, lw=0.8)
    ax.set_xlabel("device peak (MiB, ledger)")
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step time vs device peak\n(filled: measured, hollow: predicted, no overlap)", fontsize=9)
    ax.legend(fontsize=7)
    names = [r["mode"] for r in rows]
    xs = np.arange(len(rows))
    bx.bar(xs - 0.2, [r["seconds"] * 1e3 for r in rows], 0.4, color=[MODE_COLORS[n] for n in names],
           label="measured, best")
    bx.bar(xs + 0.2, [r["predicted_seconds"] * 1e3 for r in rows], 0.4, color="white",
           edgecolor=[MODE_COLORS[n] for n in names], hatch="//", label="predicted")
    medians = [sorted(r["samples"])[len(r["samples"]) // 2] * 1e3 for r in rows]
    bx.scatter(xs - 0.2, medians, color="k", marker="_", s=120, zorder=3, label="measured, median")
    bx.set_xticks(xs, names, fontsize=8)
    bw = records["bandwidths"]
    bx.set_title(f"memcpy {bw['memcpy'] / 1e9:.1f} GB/s, disk write {bw['disk_write'] / 1e6:.0f} MB/s, "
                 f"read {bw['disk_read'] / 1e6:.0f} MB/s\n(measured in the same run, page cache bypassed)",
                 fontsize=8)
    bx.set_ylabel("step time (ms)")
    bx.legend(fontsize=7)
    return plots.save(fig, records, outdir, FIGURES[1])
