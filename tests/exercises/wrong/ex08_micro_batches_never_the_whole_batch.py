"""08.4, the search stops before k = batch_size: one sample per micro-batch is never tried."""


def micro_batches_needed(fixed_bytes, bytes_per_sample, batch_size, budget):
    k = 1
    while k < batch_size and batch_size % k == 0:
        if fixed_bytes + bytes_per_sample * batch_size // k <= budget:
            return k
        k *= 2
    return None
