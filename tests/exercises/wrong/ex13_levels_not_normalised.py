"""13.2, the quantiles themselves, not divided by the largest (they span about [-1.85, 1.85])."""
from statistics import NormalDist

import numpy as np


def nf4_levels():
    delta = ((1 - 1 / 30) + (1 - 1 / 32)) / 2
    inv = NormalDist().inv_cdf
    positive = [inv(p) for p in np.linspace(delta, 0.5, 9)[:-1]]
    negative = [-inv(p) for p in np.linspace(delta, 0.5, 8)[:-1]]
    return np.sort(np.array(positive + negative + [0.0]))
