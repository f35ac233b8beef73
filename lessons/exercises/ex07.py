"""Lesson 7 exercises: the arithmetic of partitioning. Replace each body."""


def zero_bytes_per_device(params, world_size, stage):
    """Model-state bytes per device of mixed-precision Adam (2 + 2 + 12 bytes per parameter).

    ``stage`` 0 is data parallel; 1, 2, 3 are the ZeRO stages.
    """
    raise NotImplementedError("exercise 07.1")


def ring_all_reduce_bytes(nbytes, world_size):
    """Bytes one rank sends in a ring all-reduce of ``nbytes``."""
    raise NotImplementedError("exercise 07.2")


def shard_range(numel, world_size, rank):
    """``(start, stop, padded)``: rank's block of a flat buffer padded to a multiple of world_size."""
    raise NotImplementedError("exercise 07.3")


def bubble_fraction(stages, micro_batches):
    """The idle fraction of a GPipe step with ``stages`` stages and ``micro_batches`` micro-batches."""
    raise NotImplementedError("exercise 07.4")


def one_f_one_b(stage, stages, micro_batches):
    """The 1F1B order of stage ``stage``: a list of ("F", m) and ("B", m)."""
    raise NotImplementedError("exercise 07.5")
