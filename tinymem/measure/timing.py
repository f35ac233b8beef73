"""Timing helpers shared by the benchmarks and the figure sweeps: timings taken in turns, and
their median and interquartile range (the spread a figure draws as its error bars)."""
import contextlib
import time

import numpy as np


def best_time(fn, repeats=5, warmup=1):
    """Smallest wall time of ``fn()`` over ``repeats`` runs, after ``warmup`` runs (seconds).

    The minimum is the least noisy estimate of the cost on a shared machine.
    """
    for _ in range(warmup):
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def interleaved_samples(fns, repeats=5, warmup=1, clock=time.perf_counter):
    """Time several functions in turns (a, b, c, a, b, c, ...) so drift hits them all alike.

    Returns ``{name: [seconds of each turn]}`` for ``fns`` given as ``{name: callable}``.
    ``clock`` may be ``time.process_time`` (CPU seconds of this process): on a machine shared by
    other jobs that follows the work done rather than the share of the cores obtained, when the
    work runs on one thread (it misses time spent waiting for a disk or another thread).
    A function marked ``fn.self_timed = True`` times itself (the part of its work that counts,
    say the wait after an untimed setup) and returns that number of seconds as its sample.
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    samples = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = clock()
            own = fn()
            samples[name].append(float(own) if getattr(fn, "self_timed", False) else clock() - start)
    return samples


def interleaved_times(fns, repeats=5, warmup=1, clock=time.perf_counter):
    """Like :func:`interleaved_samples`, but ``{name: best seconds}`` (the minimum of the turns)."""
    return {name: min(v) for name, v in interleaved_samples(fns, repeats, warmup, clock).items()}


def spread(samples):
    """``{"median", "q1", "q3", "iqr", "best", "n"}`` (q25/q75 name q1/q3 too) of a list of timings (seconds).

    The median is what a typical run costs; the interquartile range q3 - q1 is how much the
    middle half of the runs disagree, which on a shared machine is mostly other people's jobs.
    """
    if len(samples) == 0:
        raise ValueError("spread() needs at least one timing")
    q1, median, q3 = (float(v) for v in np.percentile(samples, [25, 50, 75]))
    return {"median": median, "q1": q1, "q3": q3, "q25": q1, "q75": q3, "iqr": q3 - q1,
            "best": float(min(samples)), "n": len(samples)}


def effect_over_spread(a, b):
    """``|median(a) - median(b)| / max(iqr(a), iqr(b))`` for two lists of timings: how many
    spreads apart the two are. At 3 or more the difference is not the machine's noise; with no
    spread at all (identical timings) it is ``inf`` when the medians differ."""
    sa, sb = spread(a), spread(b)
    effect, noise = abs(sa["median"] - sb["median"]), max(sa["iqr"], sb["iqr"])
    if noise == 0:
        return float("inf") if effect else 0.0
    return effect / noise


def one_blas_thread():
    """A context in which NumPy's BLAS runs on one thread (threadpoolctl comes with
    scikit-learn; without it, nothing changes). On a shared 2-core machine a second BLAS thread
    must wait to be scheduled after every pause between matrix products, which makes steps with
    work between them (compression, I/O) slower at random; and one core stays free for a
    background thread (offload's writes and reads)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(1)
