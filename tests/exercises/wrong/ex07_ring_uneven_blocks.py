"""Wrong answer to 07.2: no padding; np.array_split makes blocks of unequal size."""
import numpy as np

TARGET = "ring_all_reduce"


def ring_all_reduce(inputs, exchange):
    n = len(inputs)
    blocks = [np.array_split(x.copy(), n) for x in inputs]
    for t in range(n - 1):
        incoming = exchange([blocks[r][(r - t - 1) % n] for r in range(n)])
        for r in range(n):
            blocks[r][(r - t - 2) % n] = blocks[r][(r - t - 2) % n] + incoming[r]
    for t in range(n - 1):
        incoming = exchange([blocks[r][(r - t) % n] for r in range(n)])
        for r in range(n):
            blocks[r][(r - t - 1) % n] = incoming[r]
    return [np.concatenate(b) for b in blocks]
