"""Lesson 8 exercises: model states by formula, the two-point extrapolation, the proposal, and
how many micro-batches a budget needs. Replace each body."""


def model_state_bytes(n_params, precision, optimizer_bytes_per_param):
    """``{"parameter", "gradient", "optimizer"}`` device bytes for ``n_params`` weights trained
    at ``precision`` ("fp32", "fp16" or "bf16": half weights and gradients, fp32 masters in the
    optimizer bucket) with an optimizer keeping ``optimizer_bytes_per_param`` bytes of state."""
    raise NotImplementedError("exercise 08.1")


def extrapolated_peak(totals_a, totals_b, m_a, m_b, m):
    """The peak at micro-batch ``m`` from the per-event totals of two runs at ``m_a`` and ``m_b``
    (same events, same order): extrapolate every event linearly, then take the largest."""
    raise NotImplementedError("exercise 08.2")


def propose(rows, budget):
    """The fastest row (dicts with "bytes" and "seconds") whose bytes fit ``budget``; among
    equally fast ones the smallest; ``None`` when nothing fits."""
    raise NotImplementedError("exercise 08.3")


def micro_batches_needed(fixed_bytes, bytes_per_sample, batch_size, budget):
    """The smallest k in 1, 2, 4, ... that divides ``batch_size`` with
    fixed_bytes + bytes_per_sample · batch_size / k <= budget; ``None`` if no such k."""
    raise NotImplementedError("exercise 08.4")
