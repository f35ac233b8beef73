"""Wrong answer to 07.2: blocks gathered raw, then every rank adds them up starting from its own.

Right sizes and right number of steps for an all-gather of inputs... but the messages are whole
blocks of every rank's *input*, each rank sums in its own order, and the bits differ across ranks.
"""
import numpy as np

TARGET = "ring_all_reduce"


def ring_all_reduce(inputs, exchange):
    n = len(inputs)
    block = -(-inputs[0].size // n)
    padded = []
    for x in inputs:
        p = np.zeros(n * block)
        p[:x.size] = x
        padded.append(p.reshape(n, block))
    # pass every rank's whole input around, one block at a time: (N-1) steps per block
    seen = [[padded[r]] for r in range(n)]
    current = [padded[r] for r in range(n)]
    for _ in range(n - 1):
        arrived = [np.stack(exchange([current[r][b] for r in range(n)])) for b in range(n)]
        current = [np.stack([arrived[b][r] for b in range(n)]) for r in range(n)]
        for r in range(n):
            seen[r].append(current[r])
    return [sum(seen[r]).reshape(-1)[:inputs[0].size] for r in range(n)]
