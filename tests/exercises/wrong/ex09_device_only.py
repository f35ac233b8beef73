"""Lesson 9, one plausible wrong answer: the ledger's device bytes only (live_bytes' default place),
so a leak in host memory goes unseen. Only the mistaken function is here; the test puts it in
place of the reference answer's."""
import gc

import tinymem as tm


def leaked_bytes_per_step(step_fn, steps=4):
    step_fn()
    gc.collect()
    before = tm.memory.live_bytes()
    for _ in range(steps):
        step_fn()
    gc.collect()
    return (tm.memory.live_bytes() - before) / steps
