"""Run one real training step of a combination and read its peak three ways.

``ledger``: the ledger's device peak of the step, without what was live before the model was
built (what the planner predicts); ``ledger_delta``: the ledger's growth above the bytes live
when the step began; ``measured``: the allocator's growth above the same point (tracemalloc on
NumPy, the CuPy pool on a GPU), which is what ``ledger_delta`` must agree with.
"""
import gc
import time

from ... import memory, random
from .recipe import TrainingStep


def measure_step(workload, combo, batch_size, budget=None, steps=1, seed=0):
    """Warm-up step, ``steps`` measured steps, one timed step at ``batch_size`` (all under
    ``budget`` if given).

    Returns ``{"ledger", "ledger_delta", "measured", "by_bucket", "losses", "seconds"}``; raises
    :class:`tinymem.OutOfMemoryError` when the budget is exceeded (the warm-up step too runs
    under it).
    """
    random.manual_seed(seed)
    gc.collect()
    base = memory.LEDGER.by_bucket()  # bytes of whatever lived before: not this step's
    step = TrainingStep(workload, combo)
    batch = workload.batch(batch_size)
    losses = []
    try:
        with memory.track(budget=budget, measure=False):
            losses.append(step.step(batch))
        peaks = []
        for _ in range(steps):
            step.optimizer.zero_grad()
            gc.collect()
            with memory.track(budget=budget, measure=True, timeline=False, device=workload.device) as t:
                losses.append(step.step(batch))
            peaks.append(t)
        # Timed apart: tracemalloc slows Python code about 2x while it traces.
        step.optimizer.zero_grad()
        with memory.track(budget=budget, measure=False, timeline=False):
            start = time.perf_counter()
            losses.append(step.step(batch))
            seconds = time.perf_counter() - start
    finally:
        step.close()
    t = max(peaks, key=lambda tr: tr.peak())
    by_bucket = {b: n - base[b] for b, n in t.peak_by_bucket().items()}
    return {"ledger": t.peak() - sum(base.values()), "ledger_delta": t.peak_delta(),
            "measured": t.measured_peak(), "by_bucket": by_bucket, "losses": losses, "seconds": seconds}
