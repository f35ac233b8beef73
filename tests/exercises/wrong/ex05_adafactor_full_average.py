"""05.2, Adam's full average of g² kept instead of the factored one (right only for rank-1 g²)."""
import numpy as np


def adafactor_second_moment(grads, eps1=1e-30, beta2_decay=-0.8):
    v = np.zeros(grads[0].shape)
    for t, g in enumerate(grads, start=1):
        v += t ** beta2_decay * (np.asarray(g, np.float64) ** 2 - v)
    return v
