"""Wrong answer to 07.2: the reduce-scatter alone; each rank keeps partial sums in all blocks but its own."""
import numpy as np

TARGET = "ring_all_reduce"


def ring_all_reduce(inputs, exchange):
    n = len(inputs)
    block = -(-inputs[0].size // n)
    buffers = []
    for x in inputs:
        padded = np.zeros(n * block)
        padded[:x.size] = x
        buffers.append(padded.reshape(n, block))
    for t in range(n - 1):
        incoming = exchange([buffers[r][(r - t - 1) % n] for r in range(n)])
        for r in range(n):
            buffers[r][(r - t - 2) % n] += incoming[r]
    return [b.reshape(-1)[:inputs[0].size] for b in buffers]
