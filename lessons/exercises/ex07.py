"""Lesson 7 exercises: build the ZeRO arithmetic, the ring all-reduce and the pipeline schedules.

Replace each body. The checks (tests/exercises/test_ex07.py) switch tinymem's own versions off
while your code runs (calculator, ring, pipeline): build these, do not import them.
"""


def zero_bytes_per_device(params, world_size, stage):
    """Model-state bytes per device for mixed-precision Adam over ``world_size`` devices.

    Per parameter: a 2-byte fp16 weight, a 2-byte fp16 gradient and 12 bytes of optimizer
    state (fp32 master weight, momentum, variance). ``stage`` 0 is data parallel (everything
    replicated); stage 1 shards the optimizer state, stage 2 the gradients too, stage 3 the
    weights too.
    """
    raise NotImplementedError("exercise 07.1")


def ring_all_reduce(inputs, exchange):
    """Sum the N equal-length 1-D float64 arrays ``inputs`` (rank r holds ``inputs[r]``) by the ring.

    All ranks move in lockstep: ``exchange(outgoing)`` takes a list of N arrays, ``outgoing[r]``
    being what rank r sends to rank (r+1) % N, and returns the list ``incoming``, where
    ``incoming[r]`` is what rank r received from rank (r-1) % N. Every message is one block:
    the buffer, padded with zeros to a multiple of N, cut into N equal blocks. Return the list
    of the N ranks' results (each the sum of all inputs, with the same bits on every rank).
    """
    raise NotImplementedError("exercise 07.2")


def gpipe_timeline(stages, micro_batches):
    """GPipe's schedule as a grid: ``timeline[s][t]`` is ("F", m), ("B", m) or None (idle).

    Stage s at time slot t. Each forward and each backward of one micro-batch on one stage
    takes one slot. ("F", m) on stage s needs ("F", m) of stage s-1 in an earlier slot;
    ("B", m) on stage s needs ("B", m) of stage s+1 in an earlier slot, and on the last stage
    its own ("F", m). GPipe runs all forwards, then all backwards, each as early as it can.
    All rows have the same length, up to the last busy slot.
    """
    raise NotImplementedError("exercise 07.3")


def bubble_fraction(stages, micro_batches):
    """The idle fraction of a GPipe step: idle slots / all slots, as a formula in S and M."""
    raise NotImplementedError("exercise 07.4")


def one_f_one_b(stage, stages, micro_batches):
    """The 1F1B order of stage ``stage``: a list of ("F", m) and ("B", m).

    Stage s runs just enough forwards for the pipeline to fill, then alternates one forward
    and one backward, then drains the backwards left.
    """
    raise NotImplementedError("exercise 07.5")
