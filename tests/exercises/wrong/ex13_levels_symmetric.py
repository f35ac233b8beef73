"""13.2, symmetric levels (as many below zero as above, no exact zero) at evenly spaced probabilities."""
from statistics import NormalDist

import numpy as np


def nf_levels(bits):
    offset = 1 - (1 / (2 * (2 ** bits - 1)) + 1 / 2 ** (bits + 1)) / 2
    levels = np.array([NormalDist().inv_cdf(p) for p in np.linspace(1 - offset, offset, 2 ** bits)])
    return levels / levels.max()
