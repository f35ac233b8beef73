"""Figures: what offload does to device memory over a step, and what it costs in time.

``offload_timeline.png``: device memory over one Adam step of an MLP with no offload, with the
saved activations offloaded to disk (prefetch 2), and with the layers streamed from the host
(optimizer state and update on the host too).

``offload_tradeoff.png``: step time against device peak for no offload, host, disk and disk
with prefetch, beside the time *predicted* from the bytes each mode moved and the bandwidths
measured in the same run (memcpy for host; disk write and read for disk, with every file flushed
and evicted from the page cache so that the reads hit the disk itself); and the time the step
waited for the disk, which prefetch should cut. The steps are timed in turns on one BLAS thread
(the other core is left to the I/O thread) as the training thread's CPU time plus the time it
waited for writes and reads, and drawn as medians with their interquartile range. The claims
compare them turn by turn (:func:`..measure.claims.slower_in_turns`) and by lower quartiles,
which the other jobs of a shared machine cannot push up.
The sizes are narrow layers and a large batch: many saved bytes per flop, so that the cost of
moving them stands well above the noise of a shared machine.
"""
import contextlib
import tempfile
import time

import numpy as np

from .. import functional as F
from .. import memory, models, optim, plots, random
from ..autograd import tensor
from ..measure.claims import IN_TURNS, SLOWER_SHARE, Claim, slower_in_turns
from ..measure.timing import one_blas_thread, paired_turns, spread
from ..techniques import offload

NAME = "offload"
ORDER = 40
FIGURES = ["offload_timeline.png", "offload_tradeoff.png"]
PAGE_CACHE = False  # every file flushed and evicted: the reads hit the disk itself
MODES = ("none", "host", "disk", "disk+prefetch")
CORE_SHARE = 0.8  # the plain step must get this much of a core for the disk prediction to be judged
MODE_COLORS = {"none": "#4c72b0", "host": "#55a868", "disk": "#c44e52", "disk+prefetch": "#8172b2"}
TIMELINE_TITLES = {"no offload": "no offload", "activation offload": "activations to disk, prefetch 2",
                   "layer streaming": "layers streamed from the host\n(Adam's state and update there too)"}


def config(quick):
    """Narrow layers and a large batch: many saved bytes per flop, so transfers show."""
    if quick:
        return {"sizes": [128] + [128] * 8 + [10], "batch": 1024, "repeats": 5}
    return {"sizes": [256] + [256] * 12 + [10], "batch": 2048, "repeats": 25}


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


def _stall(ctx):
    """Seconds the main thread waited for writes and reads in one step (0 without offload)."""
    if not hasattr(ctx, "stats"):
        return 0.0
    s = ctx.stats()
    return s["wait_s"] + s["write_wait_s"]


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
                max_by_bucket=t.max_by_bucket(), measured_peak=t.measured_peak(), peak_delta=t.peak_delta(),
                **extra)


def measure_modes(cfg, device, directory):
    """Device peak and bytes moved per mode; then the steps of all modes in turns (``repeats``
    turns, one BLAS thread), each turn also measuring the bandwidths, so that drift hits all
    alike. A step's time is the training thread's CPU time plus the time it waited for the disk:
    what the step costs when it has a core to itself (the wall time, kept as ``wall_samples``,
    also counts the turns other jobs take on a shared machine). Returns rows with every step's
    time and I/O stall, and the best bandwidths seen."""
    model, x, y = make_problem(cfg, device)
    opt = optim.SGD(model.parameters(), lr=1e-3)
    rows = {}
    for mode in MODES:
        with memory.track(device=device) as t:
            ctx = train_step(model, opt, x, y, activation_context(mode, directory))
        stats = ctx.stats() if mode != "none" else {"bytes_out": 0, "bytes_in": 0}
        rows[mode] = {"mode": mode, "peak": t.peak(), "peak_delta": t.peak_delta(),
                      "measured_peak": t.measured_peak(), "max_by_bucket": t.max_by_bucket(),
                      "bytes_out": stats["bytes_out"], "bytes_in": stats["bytes_in"],
                      "samples": [], "wall_samples": [], "stall_samples": []}
    sizes = saved_sizes(model, x, y)
    bandwidths = {}
    with one_blas_thread():
        for _ in range(cfg["repeats"]):
            for mode in MODES:
                wall, cpu = time.perf_counter(), time.thread_time()
                ctx = train_step(model, opt, x, y, activation_context(mode, directory))
                cpu, wall = time.thread_time() - cpu, time.perf_counter() - wall
                stall = _stall(ctx)
                rows[mode]["samples"].append(cpu + stall)
                rows[mode]["wall_samples"].append(wall)
                rows[mode]["stall_samples"].append(stall)
            bw = offload.measure_bandwidths(directory=directory, repeats=1, device=device,
                                            page_cache=PAGE_CACHE, sizes=sizes)
            bandwidths = {k: max(v, bandwidths.get(k, 0)) for k, v in bw.items()}
    return rows, bandwidths


def run(quick=False, device="cpu"):
    cfg = config(quick)
    directory = tempfile.gettempdir()
    timelines = [_timeline_run(cfg, device, kind, directory) for kind in TIMELINE_TITLES]
    rows, bandwidths = measure_modes(cfg, device, directory)
    # The plain step's lower quartile: its cost with a core to itself, what the bytes add to.
    base = spread(rows["none"]["samples"])["q1"]
    for mode, row in rows.items():
        row.update({k: v for k, v in spread(row["samples"]).items() if k != "n"})
        row["seconds"] = row["median"]
        place = {"none": None, "host": "host"}.get(mode, "disk")
        row["predicted_seconds"] = (base if place is None else offload.predicted_seconds(
            base, row["bytes_out"], row["bytes_in"], bandwidths, place))
        row["ratio_to_predicted"] = row["q1"] / row["predicted_seconds"]
        row["stall_median"] = spread(row["stall_samples"])["median"]
    modes = {m: rows[m]["samples"] for m in MODES}
    targets = {"disk_over_predicted": rows["disk"]["ratio_to_predicted"],
               "prefetch_over_disk": paired_turns(modes["disk+prefetch"], modes["disk"])["q1_ratio"],
               "host_over_none": paired_turns(modes["host"], modes["none"])["q1_ratio"],
               "disk_over_none": paired_turns(modes["disk"], modes["none"])["q1_ratio"],
               "io_stall_saved_s": rows["disk"]["stall_median"] - rows["disk+prefetch"]["stall_median"],
               # CPU time over wall time of the plain step (median of turns): the share of a core
               # the training thread got. Below 1, other jobs held the cores, the I/O thread's too.
               "core_share": float(np.median(np.divide(rows["none"]["samples"], rows["none"]["wall_samples"]))),
               "stream_param_peak_over_two_layers":
                   timelines[2]["param_peak"] / timelines[2]["two_layer_bound"],
               "activation_arrays_in_workspace": timelines[1]["peak_by_bucket"]["workspace"]
                   / (4 * cfg["batch"] * max(cfg["sizes"][1:-1]))}
    return {"config": dict(cfg, optimizer_timeline="Adam", optimizer_tradeoff="SGD", activation="tanh",
                           page_cache=PAGE_CACHE, directory=directory, blas_threads=1),
            "timelines": timelines, "modes": [rows[m] for m in MODES], "bandwidths": bandwidths,
            "targets": targets}


def _mode(r, name):
    return next(m for m in r["modes"] if m["mode"] == name)


def _slower(r, a, b, key="samples"):
    """``a``'s steps (or its I/O waits, ``key="stall_samples"``) slower than ``b``'s, turn by turn."""
    return slower_in_turns(_mode(r, a)[key], _mode(r, b)[key])


def _as_predicted(r):
    """The disk step's lower quartile over its no-overlap prediction, judged only when the plain
    step got ``CORE_SHARE`` of a core: the prediction takes the best bandwidths of the run, and an
    I/O thread that waits for a core of its own writes slower than that (a run on a 2-core machine
    at load 7, the step getting 39% of a core, measured 1.31; at load 6 with a full core, 1.11)."""
    share = r["targets"]["core_share"]
    if share < CORE_SHARE:
        return (f"the machine was too busy to show it: the plain step got {share:.0%} of a core "
                f"(CPU / wall time; needs {CORE_SHARE:.0%}), so the I/O thread had none of its own"), None
    ratio = r["targets"]["disk_over_predicted"]
    return ratio, abs(ratio - 1) <= 0.25


def _same_bytes(r):
    """The bytes each offload mode moved out in one step (MB), and whether they are one number
    that the disk modes also read back: the time the modes differ by is then bandwidth and
    overlap, not work."""
    moved = [m for m in r["modes"] if m["mode"] != "none"]
    out = {m["bytes_out"] for m in moved}
    back = all(m["bytes_in"] == m["bytes_out"] for m in moved if m["mode"].startswith("disk"))
    return max(out) / 1e6, len(out) == 1 and back and min(out) > 0


CLAIMS = [
    Claim("offload_lowers_peak", "every offload mode lowers the device peak below no offload's (largest ratio < 0.8)",
          lambda r: (lambda v: (v, v < 0.8))(max(m["peak"] for m in r["modes"][1:]) / r["modes"][0]["peak"])),
    Claim("streaming_two_layers", "streaming keeps at most two layers' weights on the device",
          lambda r: (r["targets"]["stream_param_peak_over_two_layers"],
                     r["targets"]["stream_param_peak_over_two_layers"] <= 1)),
    Claim("same_bytes_moved", "host, disk and disk + prefetch move the same bytes out of the device, and the disk "
          "modes read all of them back (counted; MB per step)", _same_bytes),
    Claim("disk_costs_time", f"a step with activations on disk is slower than without offload, {IN_TURNS}",
          lambda r: _slower(r, "disk", "none"), modes=("full",)),
    Claim("host_cheaper_than_disk", f"offload to host costs less time than offload to disk, {IN_TURNS}",
          lambda r: _slower(r, "disk", "host"), modes=("full",)),
    # A claim that something is *not* faster holds unless the test of "faster" passes: prefetch
    # leaves a few per cent of the step (the wait that remains) and noise of that size either way.
    Claim("prefetch_not_faster_than_none",
          f"disk + prefetch is not faster than no offload: not in >= {SLOWER_SHARE:.0%} of paired interleaved "
          "turns and by lower quartiles (shown: turns it was faster, none's lower quartile over its own)",
          lambda r: (lambda v, faster: (v, not faster))(*_slower(r, "none", "disk+prefetch")), modes=("full",)),
    Claim("disk_as_predicted", "the disk step takes within 25% of the time predicted from bytes, bandwidths and "
          f"the plain step (lower quartiles; judged when the step got >= {CORE_SHARE:.0%} of a core, so that the "
          "I/O thread could have the other)", _as_predicted, modes=("full",)),
    Claim("prefetch_hides_io", f"prefetch cuts the time the step waits for the disk, {IN_TURNS}",
          lambda r: _slower(r, "disk", "disk+prefetch", "stall_samples"), modes=("full",)),
    Claim("prefetch_faster", f"disk + prefetch steps are faster than disk without prefetch, {IN_TURNS}",
          lambda r: _slower(r, "disk", "disk+prefetch"), modes=("full",)),
]


def plot(records, outdir):
    return [_plot_timeline(records, outdir), _plot_tradeoff(records, outdir)]


def _plot_timeline(records, outdir):
    runs = records["timelines"]
    fig, axes = plots.new_figure(ncols=len(runs), width=4.3, height=4.0)
    cfg = records["config"]
    top = max(r["peak"] for r in runs) / 2**20 * 1.05
    for k, (ax, r) in enumerate(zip(axes, runs)):
        title = TIMELINE_TITLES.get(r["kind"], r["kind"])
        plots.stacked_timeline(ax, r["timeline"], f"{title}\npeak {r['peak'] / 2**20:.1f} MiB",
                               ylabel=f"{plots.device_label(records)} memory (MiB)", legend=k == len(runs) - 1)
        ax.set_ylim(0, top)
    sizes = cfg["sizes"]
    fig.suptitle(f"Device memory over one Adam step: MLP {sizes[0]} -> {len(sizes) - 2} x {sizes[1]} -> {sizes[-1]} "
                 f"(tanh), batch {cfg['batch']}")
    arrays = records["targets"].get("activation_arrays_in_workspace")
    note = ("What to see: offloading takes the saved activations (red) off the device, but not the arrays in "
            "flight (workspace): each layer's output while forward uses it, the arrays waiting for their write, "
            "those read back ahead of use, and the gradients flowing back"
            + (f" ({arrays:.1f} arrays of batch x width floats at the peak)" if arrays else "")
            + "; streaming also keeps only two layers' weights on the device.")
    return plots.save(fig, records, outdir, FIGURES[0], note=note)


def _plot_tradeoff(records, outdir):
    fig, (ax, bx) = plots.new_figure(ncols=2, width=5.4, height=4.2)
    rows = records["modes"]
    for r in rows:
        c, peak = MODE_COLORS[r["mode"]], r["peak"] / 2**20
        ax.errorbar([peak], [r["median"] * 1e3], yerr=[[(r["median"] - r["q1"]) * 1e3], [(r["q3"] - r["median"]) * 1e3]],
                    fmt="o", color=c, ms=7, capsize=4, label=r["mode"])
        if r["mode"] != "none":
            ax.scatter([peak], [r["predicted_seconds"] * 1e3], facecolors="none", edgecolors=c, s=90, lw=1.5)
    ax.scatter([], [], facecolors="none", edgecolors="k", s=90, label="predicted, no overlap\n(from none's lower quartile)")
    ax.set_xlim(0, max(r["peak"] for r in rows) / 2**20 * 1.15)
    ax.set_ylim(0, max(max(r["q3"], r["predicted_seconds"]) for r in rows) * 1e3 * 1.35)
    ax.set_xlabel(f"peak {plots.device_label(records)} memory (MiB, ledger)")
    ax.set_ylabel("CPU + I/O wait per step (ms): median, IQR")
    ax.set_title(f"step time against device peak\n({len(rows[0]['samples'])} turns, one BLAS thread)")
    ax.legend(loc="upper left", ncols=2)
    names = [r["mode"] for r in rows[1:]]
    xs = np.arange(len(names))
    plots.timing_bars(bx, xs, [r["stall_samples"] for r in rows[1:]], 0.6, [MODE_COLORS[n] for n in names])
    bx.set_xticks(xs, names)
    bw = records["bandwidths"]
    bx.set_ylim(0, max(spread(r["stall_samples"])["q3"] for r in rows[1:]) * 1e3 * 1.3 + 1e-3)
    bx.set_ylabel("time the step waited for I/O (ms)")
    bx.set_title(f"waiting for writes and reads (median, IQR)\ndisk write {bw['disk_write'] / 1e6:.0f} MB/s, "
                 f"read {bw['disk_read'] / 1e6:.0f} MB/s (no page cache)")
    t = records["targets"]
    wall = {r["mode"]: spread(r["wall_samples"])["median"] * 1e3 for r in rows if "wall_samples" in r}
    disk = paired_turns(_mode(records, "disk")["samples"], _mode(records, "none")["samples"])
    wait = paired_turns(_mode(records, "disk")["stall_samples"], _mode(records, "disk+prefetch")["stall_samples"])
    note = (f"What to see: the disk step costs {disk['q1_ratio']:.2f}x the plain step (lower quartiles; slower in "
            f"{disk['slower']} of {disk['turns']} turns) and {t['disk_over_predicted']:.2f}x the no-overlap "
            f"prediction; prefetch hides part of the wait ({1e3 * t['io_stall_saved_s']:.0f} ms, shorter in "
            f"{wait['slower']} of {wait['turns']} turns) at the price of a few arrays more on the device. Time here is "
            "the training thread's CPU time plus its wait for I/O"
            + (": wall-clock medians on this shared machine were " + ", ".join(f"{m} {v:.0f} ms" for m, v in wall.items())
               if wall else "")
            + (f" (the plain step got {t['core_share']:.0%} of a core)" if "core_share" in t else "") + ".")
    return plots.save(fig, records, outdir, FIGURES[1], note=note)
