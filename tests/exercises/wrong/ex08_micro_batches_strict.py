"""08.4, "<" instead of "<=": a step exactly at the budget taken as not fitting."""


def micro_batches_needed(fixed_bytes, bytes_per_sample, batch_size, budget):
    k = 1
    while k <= batch_size and batch_size % k == 0:
        if fixed_bytes + bytes_per_sample * batch_size // k < budget:
            return k
        k *= 2
    return None
