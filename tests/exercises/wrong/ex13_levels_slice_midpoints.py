"""13.2, N(0, 1) cut into equal-probability slices, a level at the middle probability of each
(and the exact zero kept), instead of quantiles at evenly spaced probabilities up to the offset."""
from statistics import NormalDist

import numpy as np


def nf_levels(bits):
    half, inv = 2 ** (bits - 1), NormalDist().inv_cdf
    positive = [inv(0.5 + (j + 0.5) / (2 * half)) for j in range(half)]
    negative = [-inv(0.5 + (j + 0.5) / (2 * (half - 1))) for j in range(half - 1)]
    levels = np.sort(np.array(positive + negative + [0.0]))
    return levels / levels.max()
