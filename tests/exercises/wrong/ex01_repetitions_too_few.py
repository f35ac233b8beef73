"""01.2, r taken as the largest integer with C(s + r, s) <= l instead of the smallest with >= l."""
from math import comb


def revolve_forwards(n_steps, slots):
    r = 0
    while comb(slots + r + 1, slots) <= n_steps:
        r += 1
    return r * n_steps - comb(slots + r, slots + 1)
