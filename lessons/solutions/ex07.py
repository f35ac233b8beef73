"""Lesson 7 reference answers."""


def zero_bytes_per_device(params, world_size, stage):
    weight, grad, state = 2 * params, 2 * params, 12 * params
    if stage >= 1:
        state /= world_size
    if stage >= 2:
        grad /= world_size
    if stage >= 3:
        weight /= world_size
    return weight + grad + state


def ring_all_reduce_bytes(nbytes, world_size):
    # reduce-scatter then all-gather, each sending N-1 blocks of nbytes/N
    return 2 * (world_size - 1) * nbytes / world_size


def shard_range(numel, world_size, rank):
    shard = -(-numel // world_size)
    return rank * shard, (rank + 1) * shard, shard * world_size


def bubble_fraction(stages, micro_batches):
    return (stages - 1) / (micro_batches + stages - 1)


def one_f_one_b(stage, stages, micro_batches):
    warmup = min(stages - stage - 1, micro_batches)
    order = [("F", m) for m in range(warmup)]
    for k in range(micro_batches - warmup):
        order += [("F", warmup + k), ("B", k)]
    return order + [("B", k) for k in range(micro_batches - warmup, micro_batches)]
