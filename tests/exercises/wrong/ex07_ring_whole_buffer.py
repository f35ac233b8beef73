"""Wrong answer to 07.2: every rank passes its whole running sum around the ring, N-1 times.

It sums correctly, but each message is the whole buffer: N times the ring's traffic.
"""
import numpy as np

TARGET = "ring_all_reduce"


def ring_all_reduce(inputs, exchange):
    n = len(inputs)
    passing = [x.copy() for x in inputs]
    totals = [x.copy() for x in inputs]
    for _ in range(n - 1):
        passing = exchange(passing)
        totals = [t + p for t, p in zip(totals, passing)]
    return [np.asarray(t) for t in totals]
