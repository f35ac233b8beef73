"""Lesson 8 exercises: model states by formula, the two-point extrapolation, the proposal, and
how many micro-batches a budget needs. Replace each body."""


def model_state_bytes(shapes, precision, optimizer, offload="none"):
    """``{"parameter", "gradient", "optimizer"}`` device bytes, between steps, of a model whose
    parameters have ``shapes``, stored at ``precision`` ("fp32", "fp16" or "bf16", as
    tinymem.techniques.precision.half does it), trained with ``optimizer`` ("SGD",
    "SGD momentum", "Adam", "Adafactor" or "Adam8bit", tinymem's defaults), with ``offload``
    "none" or "optimizer" (tinymem.techniques.offload.offload_optimizer). Your state_bytes_for
    of exercise 05.1 does part of the work."""
    raise NotImplementedError("exercise 08.1")


def extrapolated_peak(rows_a, rows_b, phases, m_a, m_b, m):
    """``(total, by_bucket, phase)``: the peak at micro-batch ``m`` from two probe runs at
    ``m_a`` and ``m_b``. ``rows_a`` and ``rows_b`` list, event by event (same events, same
    order), the bytes of each bucket ({bucket: bytes}); ``phases`` the phase in force at each
    event. ``by_bucket`` is the split at the peak, ``phase`` where it falls."""
    raise NotImplementedError("exercise 08.2")


def propose(rows, budget):
    """The fastest row (dicts with "bytes" and "seconds") whose bytes fit ``budget``; among
    equally fast ones the smallest; ``None`` when nothing fits."""
    raise NotImplementedError("exercise 08.3")


def micro_batches_needed(fixed_bytes, bytes_per_sample, batch_size, budget):
    """The smallest k in 1, 2, 4, ... that divides ``batch_size`` with
    fixed_bytes + bytes_per_sample · batch_size / k <= budget; ``None`` if no such k."""
    raise NotImplementedError("exercise 08.4")
