"""13.2, 16 symmetric levels (8 below zero, 8 above, no exact zero) at evenly spaced probabilities."""
from statistics import NormalDist

import numpy as np


def nf4_levels():
    delta = ((1 - 1 / 30) + (1 - 1 / 32)) / 2
    levels = np.array([NormalDist().inv_cdf(p) for p in np.linspace(1 - delta, delta, 16)])
    return levels / levels.max()
