"""Timing helpers shared by the benchmarks and the figure sweeps."""
import time


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


def interleaved_times(fns, repeats=5, warmup=1, clock=time.perf_counter):
    """Time several functions in turns (a, b, c, a, b, c, ...) so drift hits them all alike.

    Returns ``{name: best seconds}`` for ``fns`` given as ``{name: callable}``. ``clock`` may be
    ``time.process_time`` (CPU seconds of this process): on a machine shared by other jobs that
    follows the work done rather than the share of the cores obtained, when the work runs on
    one thread.
    """
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    best = {name: float("inf") for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = clock()
            fn()
            best[name] = min(best[name], clock() - start)
    return best
