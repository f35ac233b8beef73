"""13.2, the 4-bit offset ((1 - 1/30) + (1 - 1/32)) / 2 kept for every bit width."""
from statistics import NormalDist

import numpy as np


def nf_levels(bits):
    half, offset, inv = 2 ** (bits - 1), ((1 - 1 / 30) + (1 - 1 / 32)) / 2, NormalDist().inv_cdf
    positive = [inv(p) for p in np.linspace(offset, 0.5, half + 1)[:-1]]
    negative = [-inv(p) for p in np.linspace(offset, 0.5, half)[:-1]]
    levels = np.sort(np.array(positive + negative + [0.0]))
    return levels / levels.max()
