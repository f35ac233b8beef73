"""13.2, the quantiles themselves, not divided by the largest (4 bits: about [-1.85, 1.85])."""
from statistics import NormalDist

import numpy as np


def nf_levels(bits):
    half, inv = 2 ** (bits - 1), NormalDist().inv_cdf
    offset = 1 - (1 / (2 * (2 ** bits - 1)) + 1 / 2 ** (bits + 1)) / 2
    positive = [inv(p) for p in np.linspace(offset, 0.5, half + 1)[:-1]]
    negative = [-inv(p) for p in np.linspace(offset, 0.5, half)[:-1]]
    return np.sort(np.array(positive + negative + [0.0]))
