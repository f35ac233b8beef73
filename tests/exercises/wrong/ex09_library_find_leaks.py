"""Lesson 9, one plausible wrong answer: the library's leak finder instead of the ledger's growth.
Only the mistaken function is here; the test puts it in place of the reference answer's."""
import tinymem as tm


def leaked_bytes_per_step(step_fn, steps=4):
    return sum(leak.bytes_per_step for leak in tm.memory.find_leaks(step_fn, steps=steps))
