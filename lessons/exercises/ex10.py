"""Lesson 10 exercises: the replay buffer's index arithmetic and its memory. Replace each body
(NumPy only)."""
import numpy as np  # noqa: F401  (you will need it)


def stack_slots(ends, steps, k):
    """Frame dedup: the slot numbers of the k-frame stacks ending at slots ``ends`` (int array
    (B,)), whose step numbers inside their episodes are ``steps`` (B,): an int array (B, k),
    oldest frame first. A stack never reaches before its episode's reset frame (step 0): the
    missing frames repeat it."""
    raise NotImplementedError("exercise 10.1")


def sampleable(numbers, steps, written, capacity, k):
    """Which slot numbers (int array, counting every step ever added) can be sampled from a ring
    of ``capacity`` slots after ``written`` steps: the slot ends a transition (its step number,
    ``steps[i]``, is > 0), and every frame of the transition's *obs* stack (the stack ending one
    slot earlier) is still stored. A boolean array."""
    raise NotImplementedError("exercise 10.2")


def bytes_per_transition(scheme, frame_shape, k):
    """Bytes one slot costs for ``scheme`` in "float32", "uint8", "dedup" (uint8 frames of
    ``frame_shape``, stacks of ``k``), counting the 13 bytes of index every scheme keeps
    (int32 step, int32 action, float32 reward, bool terminated)."""
    raise NotImplementedError("exercise 10.3")


def capacity_for_budget(budget_bytes, scheme, frame_shape, k):
    """The largest number of transitions a buffer of ``scheme`` can hold in ``budget_bytes``."""
    raise NotImplementedError("exercise 10.4")
