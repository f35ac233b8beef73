"""Lesson 9, one plausible wrong answer: the growth divided with //, which drops the remainder when
the steps leak unequal amounts. Only the mistaken function is here; the test puts it in place of
the reference answer's."""
import gc

import tinymem as tm


def leaked_bytes_per_step(step_fn, steps=4):
    step_fn()
    gc.collect()
    before = tm.memory.live_bytes(None, None)
    for _ in range(steps):
        step_fn()
    gc.collect()
    return (tm.memory.live_bytes(None, None) - before) // steps
