"""Stacking the techniques: one model, each technique added on top of the previous ones.

    fp32 + Adam                  the plain run: 16 bytes per parameter + activations
    + Adam8bit                   optimizer state 8·N -> ~2·N bytes
    + checkpoint (sqrt)          saved activations of n blocks -> ~sqrt(n) segment inputs + one
                                 segment (for an MLP, per-block checkpointing saves little: a
                                 ReLU's saved output *is* the next Linear's saved input)
    + k micro-batches            activations of B samples -> of B/k samples (gradient accumulated)
    + optimizer state on host    the remaining ~2·N optimizer bytes leave the device

Half precision is not in the stack on purpose: with fp32 masters it *adds* 4 bytes per
parameter to the optimizer bucket (plus 4·N of master gradients during the step) and saves half
of the activations, which the checkpoint and micro-batches have already made small; and it does
not compose here with optimizer offload (see :mod:`.recipe`). The planner still weighs it.

:func:`waterfall` measures every stage with the ledger (peak per bucket) and times their steps
side by side in one run (:func:`tinymem.measure.timing.interleaved_samples`), so the time each
technique adds is a ratio measured under the same conditions; each stage keeps every timing
(``samples``) and their median (``seconds``).
"""
import time

from ... import memory
from ...measure.timing import interleaved_samples, spread
from .recipe import Combination, TrainingStep
from .verify import measure_step


def stages(micro_batches=8, checkpoint="sqrt"):
    """``[(label, Combination)]``: each stage is the previous one plus one technique."""
    base = Combination("none", "fp32", "Adam", "none", 1)
    steps = [("fp32 + Adam", base)]
    for label, change in (("+ Adam8bit", {"optimizer": "Adam8bit"}),
                          (f"+ checkpoint ({checkpoint})", {"checkpoint": checkpoint}),
                          (f"+ {micro_batches} micro-batches", {"micro_batches": micro_batches}),
                          ("+ optimizer state on host", {"offload": "optimizer"})):
        steps.append((label, steps[-1][1]._replace(**change)))
    return steps


def waterfall(workload, batch_size, micro_batches=8, checkpoint="sqrt", repeats=3, clock=time.perf_counter):
    """Per stage: label, combination, ledger peak (and per bucket), allocator-measured peak
    growth, and the step's timings taken in turns (``samples``, their median ``seconds``; by
    ``clock``, e.g. ``time.process_time`` for CPU time on a shared machine); a list of dicts."""
    records = []
    for label, combo in stages(micro_batches, checkpoint):
        measured = measure_step(workload, combo, batch_size)
        records.append({"label": label, "combo": combo._asdict(), "ledger": measured["ledger"],
                        "by_bucket": measured["by_bucket"], "ledger_delta": measured["ledger_delta"],
                        "measured": measured["measured"]})
    steps = {r["label"]: TrainingStep(workload, Combination(**r["combo"])) for r in records}
    batch = workload.batch(batch_size)
    try:
        with memory.track(measure=False, timeline=False):
            samples = interleaved_samples({label: (lambda s=s: s.step(batch)) for label, s in steps.items()},
                                          repeats=repeats, clock=clock)
    finally:
        for s in steps.values():
            s.close()
    for r in records:
        r["samples"] = samples[r["label"]]
        r["seconds"] = spread(r["samples"])["median"]
    return records


def train_under(workload, combo, batch_size, budget, steps=3, seed=0):
    """Train ``steps`` steps of ``combo`` under a device ``budget``; returns the losses.

    Raises :class:`tinymem.OutOfMemoryError` when a step does not fit."""
    step = TrainingStep(workload, combo)
    batch = workload.batch(batch_size)
    try:
        with memory.track(budget=budget, measure=False, timeline=False):
            return [step.step(batch) for _ in range(steps)]
    finally:
        step.close()
