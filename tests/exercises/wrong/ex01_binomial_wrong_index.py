"""01.2, the subtracted binomial taken as C(s + r, s) instead of C(s + r, s + 1)."""
from math import comb


def revolve_forwards(n_steps, slots):
    r = 0
    while comb(slots + r, slots) < n_steps:
        r += 1
    return r * n_steps - comb(slots + r, slots)
