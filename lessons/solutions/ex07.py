"""Lesson 7 reference answers."""
import numpy as np


def zero_bytes_per_device(params, world_size, stage):
    weight, grad, state = 2 * params, 2 * params, 12 * params
    if stage >= 1:
        state /= world_size
    if stage >= 2:
        grad /= world_size
    if stage >= 3:
        weight /= world_size
    return weight + grad + state


def ring_all_reduce(inputs, exchange):
    n = len(inputs)
    block = -(-inputs[0].size // n)
    buffers = []
    for x in inputs:  # pad to n blocks of equal size
        padded = np.zeros(n * block, x.dtype)
        padded[:x.size] = x
        buffers.append(padded.reshape(n, block))
    # reduce-scatter: at step t rank r passes on block (r-t-1) and adds the one from its left
    for t in range(n - 1):
        incoming = exchange([buffers[r][(r - t - 1) % n] for r in range(n)])
        for r in range(n):
            buffers[r][(r - t - 2) % n] += incoming[r]
    # rank r now holds the full sum of block r; all-gather passes the finished blocks on
    for t in range(n - 1):
        incoming = exchange([buffers[r][(r - t) % n] for r in range(n)])
        for r in range(n):
            buffers[r][(r - t - 1) % n] = incoming[r]
    return [b.reshape(-1)[:inputs[0].size] for b in buffers]


def gpipe_timeline(stages, micro_batches):
    slots = 2 * (micro_batches + stages - 1)
    timeline = [[None] * slots for _ in range(stages)]
    for s in range(stages):
        for m in range(micro_batches):
            timeline[s][s + m] = ("F", m)  # forward m reaches stage s after s hops
            # the last stage starts backwards when its forwards end; each stage up waits one more
            timeline[s][micro_batches + stages - 1 + (stages - 1 - s) + m] = ("B", m)
    return timeline


def bubble_fraction(stages, micro_batches):
    # each stage is busy 2M slots out of 2(M+S-1)
    return (stages - 1) / (micro_batches + stages - 1)


def one_f_one_b(stage, stages, micro_batches):
    warmup = min(stages - stage - 1, micro_batches)
    order = [("F", m) for m in range(warmup)]
    for k in range(micro_batches - warmup):
        order += [("F", warmup + k), ("B", k)]
    return order + [("B", k) for k in range(micro_batches - warmup, micro_batches)]
