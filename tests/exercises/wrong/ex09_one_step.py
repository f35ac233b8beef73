"""Lesson 9, one plausible wrong answer: the growth of one step after the warm-up, taken for every
step's (right only when every step leaks the same). Only the mistaken function is here; the test
puts it in place of the reference answer's."""
import gc

import tinymem as tm


def leaked_bytes_per_step(step_fn, steps=4):
    step_fn()
    gc.collect()
    before = tm.memory.live_bytes(None, None)
    step_fn()
    gc.collect()
    return tm.memory.live_bytes(None, None) - before
