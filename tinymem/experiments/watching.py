"""Figures: watching memory as top and nvidia-smi do, knowing who holds it, sharing one device.

    watching_layers.png     one training run seen three ways, one above the other: the ledger
                            (what tinymem owns), the allocator (tracemalloc, or CuPy's pool) and
                            the process (RSS, or NVML), sampled in a thread from the same run
    watching_modules.png    the peak of a training step by module and bucket, for the
                            Transformer LM and the U-Net (sums exactly to the ledger's peak)
    watching_processes.png  two training processes on one simulated device over time: no limit,
                            fractions, a queue, separate devices; with each job's time

The run also times a Transformer step with attribution on and off, in turns.
"""
import os
import statistics
import time

import numpy as np

from .. import memory, models, optim, planner, plots, random
from .. import functional as F
from ..autograd import Tensor
from ..measure.claims import Claim
from ..measure.records import meta
from ..measure.timing import interleaved_times
from . import sharing_jobs

NAME = "watching"
ORDER = 5
FIGURES = ["watching_layers.png", "watching_modules.png", "watching_processes.png"]
MiB = 2**20


def _layers(quick, device):
    """A few Adam steps of an MLP under ``track(monitor=...)``: the three layers and their gaps."""
    random.manual_seed(0)
    width, batch, steps = (256, 256, 2) if quick else (1024, 1024, 3)
    model = models.MLP([64, width, width, width, 10]).to(device)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    x = Tensor(random.randn((batch, 64), device), device=device)
    y = Tensor(np.arange(batch) % 10, device=device)  # a bare NumPy array would go to the default device

    def step():
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    # No warm-up: the first step shows the process growing, the next ones reusing. The free
    # blocks earlier work left in the C allocator go back first, else the first step may reuse
    # them and RSS not grow at all (it measured 1% of the ledger's growth once, 98% in a fresh
    # process).
    memory.sampler.return_free_memory()
    starts = []
    with memory.track(device=device, monitor=0.001) as t:
        for _ in range(steps):
            starts.append(time.perf_counter() - t.t0)
            step()
    samples = t.process_timeline()
    late = [s["process"] for s in samples if s["t"] >= starts[-1]]
    keep = max(1, len(samples) // 600)
    return {"config": {"sizes": model.sizes, "batch": batch, "steps": steps, "optimizer": "Adam"},
            "timeline": t.timeline(), "samples": samples[::keep] + samples[-1:],
            "ledger_start": t.start, "ledger_peak": t.peak(), "ledger_growth": t.peak_delta(),
            "allocator_growth": t.measured_peak(), "process_growth": t.process_peak(),
            "process_sampled_growth": t._monitor.sampled_peak() - t._monitor.baseline,
            "process_start": t._monitor.baseline, "kernel_hwm": t._monitor.hwm,
            "allocator_start": samples[0]["allocator"], "peak_by_bucket": t.peak_by_bucket(),
            "step_starts": starts, "process_last_step_growth": max(late) - late[0]}


def _by_module(name, sizes, batch, device, depth):
    """One training step of a planner workload: the peak by (module, bucket), and the top 10."""
    random.manual_seed(0)
    work = planner.workload(name, sizes, device)
    model = work.build("none")
    opt = optim.Adam(model.parameters(), lr=1e-3)
    batch_data = work.batch(batch)
    with memory.track(device=device, measure=False) as t:
        work.loss(model, batch_data).backward()
        opt.step()
    rows = t.top(10**9, model)
    split = {}
    for r in rows:
        path = r["module"] if r["module"].startswith("(") else ".".join(r["module"].split(".")[:depth])
        split.setdefault(path, {}).setdefault(r["bucket"], 0)
        split[path][r["bucket"]] += r["bytes"]
    return {"model": name, "sizes": sizes, "batch": batch, "peak": t.peak(), "split": split,
            "by_module_sum": sum(t.by_module(model).values()), "top": rows[:10]}


def _overhead(quick, device):
    """Seconds of a Transformer training step with attribution on and off, timed in turns."""
    random.manual_seed(0)
    work = planner.workload("transformer", "64,32,32,2,2" if quick else "64,64,64,4,4", device)
    model = work.build("none")
    batch = work.batch(8 if quick else 16)

    def step(flag):
        def run():
            memory.attribution.set_enabled(flag)
            work.loss(model, batch).backward()
            model.zero_grad()
        return run

    rounds = []
    try:
        for i in range(4 if quick else 12):
            # Alternate which goes first: the first of a pair is slower by itself (caches, the
            # switch), and that would be charged to attribution.
            order = [("on", step(True)), ("off", step(False))][:: 1 if i % 2 else -1]
            rounds.append(interleaved_times(dict(order), repeats=3, warmup=1, clock=time.thread_time))
    finally:
        memory.attribution.set_enabled(True)
    ratios = [r["on"] / r["off"] for r in rounds]
    return {"on": statistics.median(r["on"] for r in rounds), "off": statistics.median(r["off"] for r in rounds),
            "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
            "rounds": len(rounds)}


def _processes(quick):
    """The four ways two jobs meet on one device, with a budget that fits one job, not two."""
    spec = {"sizes": [64, 256, 256, 256, 256, 10], "batch": 1536, "steps": 6 if quick else 30}
    peaks = {k: sharing_jobs.step_peak(dict(spec, seed=0), k) for k in (1, 2, 4, 8)}
    peak, floor = peaks[1]
    budget = peak + floor // 2  # one job fits; one job's floor beside the other's peak does not
    fits_half = next((k for k, (p, _) in sorted(peaks.items()) if p <= budget // 2), None)
    if fits_half is None:
        raise RuntimeError(f"no micro-batch count fits half of {budget:,d} B: {peaks}")
    spec["budget"] = budget
    runs = {s: sharing_jobs.run_scenario(s, spec, fits_half) for s in sharing_jobs.SCENARIOS}
    return {"spec": spec, "budget": budget, "peak": peak, "floor": floor, "fits_half": fits_half,
            "peaks": {str(k): p for k, (p, _) in peaks.items()}, "runs": runs}


def run(quick=False, device="cpu"):
    records = {"layers": _layers(quick, device)}
    sizes = {"transformer": ("64,32,32,2,2", 8) if quick else ("96,128,64,4,4", 16),
             "unet": ("1,4,8,3,32", 4) if quick else ("1,4,16,4,64", 8)}
    records["modules"] = [_by_module(n, s, b, device, depth=2) for n, (s, b) in sizes.items()]
    records["overhead"] = _overhead(quick, device)
    records["processes"] = _processes(quick)
    return records


# -- claims ------------------------------------------------------------------------------------
def _runs(r, scenario):
    return r["processes"]["runs"][scenario]


def _one_fails(r):
    a, b = _runs(r, "no limit")
    failed = [(j, k) for j, k in ((a, b), (b, a)) if j["status"] == "oom"]
    return len(failed), bool(failed) and all(str(k["pid"]) in j["message"] for j, k in failed)


def _serial(r):
    a, b = sorted(_runs(r, "queue"), key=lambda j: j["run_start"])
    return round(b["run_start"] - a["end"], 3), a["status"] == b["status"] == "done" and b["run_start"] >= a["end"] - 0.01


def _parallel(r):
    a, b = _runs(r, "devices")
    overlap = min(a["end"], b["end"]) - max(a["run_start"], b["run_start"])
    return round(overlap, 3), a["status"] == b["status"] == "done" and overlap > 0


CLAIMS = [
    Claim("attribution_sums", "the peak by module sums exactly to the ledger's peak (Transformer LM and U-Net)",
          lambda r: (sum(m["peak"] - m["by_module_sum"] for m in r["modules"]),
                     all(m["peak"] == m["by_module_sum"] for m in r["modules"]))),
    Claim("allocator_above_ledger", "tracemalloc's peak growth is the ledger's plus at most 30% "
          "(temporaries inside ops, Python objects)",
          lambda r: (r["layers"]["allocator_growth"] / r["layers"]["ledger_growth"],
                     1.0 <= r["layers"]["allocator_growth"] / r["layers"]["ledger_growth"] <= 1.3)),
    Claim("process_sees_growth", "the process's RSS grows by at least 90% of the ledger's growth",
          lambda r: (r["layers"]["process_growth"] / r["layers"]["ledger_growth"],
                     r["layers"]["process_growth"] >= 0.9 * r["layers"]["ledger_growth"]), modes=("full",)),
    Claim("process_keeps_freed_blocks", "in the last step RSS grows by under 10% of the ledger's growth: "
          "the C allocator hands out the blocks freed earlier, and top never sees them go",
          lambda r: (r["layers"]["process_last_step_growth"] / r["layers"]["ledger_growth"],
                     r["layers"]["process_last_step_growth"] < 0.1 * r["layers"]["ledger_growth"]),
          modes=("full",)),
    Claim("no_limit_one_fails", "without a limit a job fails, its OOM naming the other job's pid",
          lambda r: _one_fails(r)),
    Claim("fractions_both_run", "capped at half the device each, both jobs finish (with micro-batches)",
          lambda r: (r["processes"]["fits_half"], all(j["status"] == "done" for j in _runs(r, "fractions")))),
    Claim("queue_one_after_other", "with the device queue both finish, the second after the first",
          _serial),
    Claim("devices_in_parallel", "on separate devices (CUDA_VISIBLE_DEVICES) both run at once", _parallel),
    Claim("attribution_cheap", "attribution costs under 15% of a Transformer training step (median of turns)",
          lambda r: (r["overhead"]["ratio"], r["overhead"]["ratio"] <= 1.15), modes=("full",)),
]


# -- figures -----------------------------------------------------------------------------------
def plot(records, outdir):
    return [_plot_layers(records, outdir), _plot_modules(records, outdir), _plot_processes(records, outdir)]


def _plot_layers(records, outdir):
    r = records["layers"]
    fig, axes = plots.new_figure(nrows=3, width=10.5, height=2.8)
    cfg = r["config"]
    plots.stacked_timeline(axes[0], r["timeline"], f"1. the ledger, what tinymem owns: MLP {cfg['sizes']}, "
                           f"batch {cfg['batch']}, {cfg['steps']} Adam steps")
    axes[0].title.set_fontsize(9)
    # A sample taken once tracemalloc has stopped has no allocator reading: it is left out, not drawn as 0.
    samples = [s for s in r["samples"] if s["allocator"] is not None]
    ts = [s["t"] * 1e3 for s in samples]
    ledger = [(s["ledger"] - r["ledger_start"]) / MiB for s in samples]
    alloc = [(s["allocator"] - (r["allocator_start"] or 0)) / MiB for s in samples]
    proc = [(s["process"] - r["process_start"]) / MiB for s in samples]
    axes[1].plot(ts, alloc, color="#8172b3", label="allocator (tracemalloc), sampled")
    axes[1].plot(ts, ledger, "k--", lw=0.9, label="ledger, sampled")
    axes[1].set_title(f"2. the allocator: exact peak growth {r['allocator_growth'] / MiB:.1f} MiB, ledger "
                      f"{r['ledger_growth'] / MiB:.1f} MiB (the 1 ms samples miss the shortest peaks)\n"
                      f"(gap {(r['allocator_growth'] - r['ledger_growth']) / MiB:+.2f} "
                      "MiB: Python objects, uncounted temporaries)", fontsize=9)
    axes[2].plot(ts, proc, color="#c44e52", label="process (RSS, as top shows it), sampled")
    axes[2].plot(ts, alloc, color="#8172b3", ls="--", lw=0.9, label="allocator")
    axes[2].set_title(f"3. the process: RSS grows {r['process_growth'] / MiB:.1f} MiB over the "
                      f"{r['process_start'] / MiB:.0f} MiB held before (interpreter, NumPy, libraries);\n"
                      f"last step: {r['process_last_step_growth'] / MiB:+.1f} MiB (freed blocks are reused)",
                      fontsize=9)
    for ax in axes[1:]:
        ax.set_ylabel("growth (MiB)")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside, as the ledger's: it covers no line
        ax.set_xlim(axes[0].get_xlim())
    for ax in axes[1:]:
        ax.set_xlabel("time in the window (ms)")
    return plots.save(fig, records, outdir, FIGURES[0])


def _plot_modules(records, outdir):
    mods = records["modules"]
    fig, axes = plots.new_figure(ncols=len(mods), width=6.0, height=5.0)
    for ax, m in zip(axes, mods):
        split = _small_modules_merged(m["split"], 0.01 * m["peak"])
        order = sorted(split, key=lambda k: sum(split[k].values()))
        left = [0.0] * len(order)
        for bucket in memory.BUCKETS:
            vals = [split[k].get(bucket, 0) / MiB for k in order]
            ax.barh(range(len(order)), vals, left=left, color=plots.BUCKET_COLORS[bucket], label=bucket)
            left = [a + b for a, b in zip(left, vals)]
        for y, total in enumerate(left):  # the row's sum: a short bar is still read
            ax.text(total, y, f" {total:.2f}" if total >= 0.01 else f" {total * 1024:.1f} KiB", va="center", fontsize=8)
        ax.set_yticks(range(len(order)))
        ax.set_yticklabels(order)
        ax.set_xlabel("bytes at the peak (MiB)")
        ax.set_xlim(0, 1.18 * max(left))
        exact = "exactly" if m["by_module_sum"] == m["peak"] else "NOT"
        ax.set_title(f"{m['model']} ({m['sizes']}), batch {m['batch']}: peak {m['peak'] / MiB:.2f} MiB,\n"
                     f"the modules sum to it {exact}", fontsize=9)
        ax.legend(loc="lower right")
    return plots.save(fig, records, outdir, FIGURES[1])


def _small_modules_merged(split, floor):
    """``{module: {bucket: bytes}}`` with every module holding under ``floor`` bytes merged into
    one row (too thin to see as bars of their own); the totals are unchanged."""
    small = [k for k, v in split.items() if sum(v.values()) < floor]
    if len(small) < 2:
        return split
    merged = {k: v for k, v in split.items() if k not in small}
    rest = merged.setdefault(f"{len(small)} more, each < 1% of the peak", {})
    for k in small:
        for bucket, b in split[k].items():
            rest[bucket] = rest.get(bucket, 0) + b
    return merged


def _plot_processes(records, outdir):
    p = records["processes"]
    fig, axes = plots.new_figure(nrows=len(p["runs"]), width=10.5, height=2.1)
    end = max(j["end"] for runs in p["runs"].values() for j in runs)
    for ax, (scenario, runs) in zip(axes, p["runs"].items()):
        for job, color in zip(runs, ("#4c72b0", "#dd8452")):
            ts = [t for t, _ in job["timeline"]]
            status = "done" if job["status"] == "done" else "out of memory"
            ax.plot(ts, [b / MiB for _, b in job["timeline"]], color=color, lw=1.0,
                    label=f"job {job['label']}: {status} after {job['end'] - job['start']:.1f} s"
                          + (f", waited {job['run_start'] - job['start']:.1f} s" if scenario == "queue" else "")
                          + (f", {job['micro_batches']} micro-batches" if job["micro_batches"] > 1 else ""))
            if job["status"] == "oom":
                ax.plot(job["end"], (job["timeline"][-1][1] if job["timeline"] else 0) / MiB, "x",
                        color=color, ms=10, mew=2)
        if scenario != "devices":  # on one device the budget holds the two jobs' sum
            ts, total_bytes = _sum_of_jobs(runs)
            ax.plot(ts, [b / MiB for b in total_bytes], color="#55a868", lw=1.4, label="both jobs: what the device holds")
        ax.axhline(p["budget"] / MiB, color="#c44e52", lw=1.0, ls="--", label="the device's budget")
        if scenario == "fractions":
            ax.axhline(p["budget"] / 2 / MiB, color="#c44e52", lw=0.8, ls=":", label="each job's half")
        ax.set_ylim(bottom=0)
        total = max(j["end"] for j in runs) - min(j["start"] for j in runs)
        where = "two devices" if scenario == "devices" else "one device"
        ax.set_title(f"{scenario} ({where}): total {total:.1f} s", fontsize=9)
        ax.set_xlim(0, end * 1.02)
        ax.set_ylabel("MiB")
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: the jobs' lines fill the panel
    axes[-1].set_xlabel(f"seconds (budget {p['budget'] / MiB:.1f} MiB, a job's peak {p['peak'] / MiB:.1f} MiB)")
    return plots.save(fig, records, outdir, FIGURES[2])


def _sum_of_jobs(runs):
    """The bytes all jobs of ``runs`` hold together at each moment one of them changed."""
    events = sorted([(t, i, b) for i, job in enumerate(runs) for t, b in job["timeline"]]
                    + [(job["end"], i, 0) for i, job in enumerate(runs)])  # a finished job holds nothing
    held, ts, total = [0] * len(runs), [], []
    for t, i, b in events:
        held[i] = b
        ts.append(t)
        total.append(sum(held))
    return ts, total


def draw_command(watch, command, path):
    """The PNG of ``tinymem monitor``: each process's RSS (and GPU bytes) over time, and the sum."""
    fig, ax = plots.new_figure(width=7.5)
    for pid in sorted({pid for _, rss, _ in watch.samples for pid in rss}):
        seen = [(t, rss[pid] / MiB) for t, rss, _ in watch.samples if pid in rss]
        ax.plot([t for t, _ in seen], [v for _, v in seen], lw=1.0, label=f"{pid} {watch.names.get(pid, '')}")
        gpu = [(t, g[pid] / MiB) for t, _, g in watch.samples if pid in g]
        if gpu:
            ax.plot([t for t, _ in gpu], [v for _, v in gpu], lw=1.0, ls="--", label=f"{pid} on the GPU")
    ax.plot([t for t, _, _ in watch.samples], [sum(r.values()) / MiB for _, r, _ in watch.samples],
            "k:", lw=1.0, label="all processes (RSS)")
    ax.set_xlabel("seconds")
    ax.set_ylabel("resident memory (MiB)")
    # parse_math=False: a command is plain text, and a '$' in it is not the start of mathtext.
    ax.set_title(command if len(command) < 80 else command[:77] + "...", fontsize=9, parse_math=False)
    ax.legend(fontsize=7)
    records = {"meta": meta("cpu" if watch.gpu is None else "cuda", False)}
    records["meta"]["machine"] = "tinymem monitor on " + records["meta"]["machine"]
    return plots.save(fig, records, os.path.dirname(os.path.abspath(path)), os.path.basename(path))
