"""Timing helpers shared by the benchmarks and the figure sweeps: timings taken in turns, their
median and interquartile range (the spread a figure draws as its error bars), and
:func:`paired_turns`, the comparison of two such timings that every timing claim uses."""
import contextlib
import math
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


def paired_turns(slow, fast):
    """How two timings taken in the same turns compare, by statistics that a shared machine's
    scheduler cannot fake: ``{"turns", "slower", "share", "q1_ratio"}``.

    ``slow[i]`` and ``fast[i]`` must come from turn ``i`` of :func:`interleaved_samples` (or any
    loop that times them side by side). ``slower`` counts the turns in which ``slow`` took longer
    (``share`` = slower / turns): drift of the machine hits both sides of a turn alike, and a job
    that preempts one side flips one turn, however long it lasts. ``q1_ratio`` is the lower
    quartile of ``slow`` over that of ``fast``: other jobs only ever add time, so the fast
    quarter of the turns is the cost with a core to itself, where a median or an IQR drifts with
    the load. (The "spreads" test, difference of medians over the larger IQR, fails a real effect
    as soon as noise widens one side's IQR: once 2.2 spreads for a step 1.8x as slow.)
    Refused with a ValueError naming ``slow`` or ``fast``: fewer than two turns, lists of unequal
    length, and anything but finite numbers of seconds >= 0 (NaN, inf, negative, text, booleans).
    """
    slow, fast = _turns("slow", slow), _turns("fast", fast)
    if len(slow) != len(fast):
        raise ValueError(f"paired_turns needs slow and fast timed in the same turns; got {len(slow)} "
                         f"and {len(fast)} timings (time both in the same turns)")
    slower = int(np.sum(slow > fast))
    q1_slow, q1_fast = spread(slow)["q1"], spread(fast)["q1"]
    # A wait that prefetch hid completely takes 0 s: a lower quartile of 0 is beaten by any time
    # and ties with 0 (the ratio is inf or 1, never a ZeroDivisionError or NaN).
    q1_ratio = q1_slow / q1_fast if q1_fast > 0 else (math.inf if q1_slow > 0 else 1.0)
    return {"turns": len(slow), "slower": slower, "share": slower / len(slow), "q1_ratio": q1_ratio}


def _turns(name, values):
    """``values`` as a 1-D float array of at least two finite, non-negative timings (seconds), or a
    ValueError naming ``name``: a NaN, a string or one lone turn would otherwise give a verdict."""
    turns = np.asarray(values)
    if turns.dtype.kind not in "iuf":  # not "2.0", not True: a verdict on text or flags is none
        raise ValueError(f"paired_turns: {name} must be a list of timings in seconds (numbers); got "
                         f"{values!r:.60} ({turns.dtype})")
    turns = turns.astype(float)
    if turns.ndim != 1 or turns.size < 2:
        raise ValueError(f"paired_turns: {name} must be a flat list of at least two turns (one turn is a coin "
                         f"toss, with no quartile); got shape {turns.shape}")
    if not np.all(np.isfinite(turns)) or np.any(turns < 0):
        raise ValueError(f"paired_turns: {name} holds a timing that is not a finite number of seconds >= 0 "
                         f"({turns[~(np.isfinite(turns) & (turns >= 0))][:3].tolist()}): drop the failed turn "
                         f"from both lists")
    return turns


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
