"""Lesson 9, one plausible wrong answer: no garbage collection before reading the ledger, so
unreachable cycles still holding arrays count as leaks. Only the mistaken function is here; the
test puts it in place of the reference answer's."""
import tinymem as tm


def leaked_bytes_per_step(step_fn, steps=4):
    step_fn()
    before = tm.memory.live_bytes(None, None)
    for _ in range(steps):
        step_fn()
    return (tm.memory.live_bytes(None, None) - before) / steps
