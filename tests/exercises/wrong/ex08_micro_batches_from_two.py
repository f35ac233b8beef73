"""08.4, micro-batching taken for granted: the search starts at k = 2, even when one step fits."""


def micro_batches_needed(fixed_bytes, bytes_per_sample, batch_size, budget):
    k = solution.micro_batches_needed(fixed_bytes, bytes_per_sample, batch_size, budget)  # noqa: F821
    return 2 if k == 1 and batch_size % 2 == 0 else k
