"""08.4, powers of two that do not divide the batch allowed."""


def micro_batches_needed(fixed_bytes, bytes_per_sample, batch_size, budget):
    k = 1
    while k <= batch_size:
        if fixed_bytes + bytes_per_sample * batch_size / k <= budget:
            return k
        k *= 2
    return None
