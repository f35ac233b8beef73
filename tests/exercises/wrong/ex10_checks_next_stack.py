"""Wrong on purpose (exercise 10.2): checks that the *next_obs* stack survives, not the obs
stack one slot earlier, so transitions whose oldest frame was overwritten get sampled."""
import numpy as np

TARGET = "sampleable"


def sampleable(numbers, steps, written, capacity, k):
    numbers, steps = np.asarray(numbers), np.asarray(steps)
    oldest = max(0, written - capacity)
    return (numbers < written) & (numbers >= oldest) & (steps > 0) & (numbers - np.minimum(k - 1, steps) >= oldest)
