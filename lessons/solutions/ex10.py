"""Lesson 10 reference answers: the replay buffer's index arithmetic and its memory."""
import math

import numpy as np

INDEX_BYTES = 4 + 4 + 4 + 1


def stack_slots(ends, steps, k):
    back = np.arange(k - 1, -1, -1)
    return np.asarray(ends)[:, None] - np.minimum(back[None, :], np.asarray(steps)[:, None])


def sampleable(numbers, steps, written, capacity, k):
    numbers, steps = np.asarray(numbers), np.asarray(steps)
    oldest = max(0, written - capacity)
    first_obs_frame = numbers - 1 - np.minimum(k - 1, steps - 1)
    return (numbers < written) & (numbers >= oldest) & (steps > 0) & (first_obs_frame >= oldest)


def bytes_per_transition(scheme, frame_shape, k):
    frame = math.prod(frame_shape)
    per = {"float32": 2 * k * frame * 4, "uint8": 2 * k * frame, "dedup": frame}[scheme]
    return per + INDEX_BYTES


def capacity_for_budget(budget_bytes, scheme, frame_shape, k):
    return budget_bytes // bytes_per_transition(scheme, frame_shape, k)
