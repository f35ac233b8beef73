"""Wrong on purpose (exercise 10.1): stacks reach back across the episode start instead of
repeating the reset frame."""
import numpy as np

TARGET = "stack_slots"


def stack_slots(ends, steps, k):
    return np.asarray(ends)[:, None] - np.arange(k - 1, -1, -1)[None, :]
