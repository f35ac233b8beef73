"""05.2, the outer product of the two factors, not divided by the mean of the row factor."""
import numpy as np


def adafactor_second_moment(grads, eps1=1e-30, beta2_decay=-0.8):
    row = np.zeros((grads[0].shape[0], 1))
    col = np.zeros((1, grads[0].shape[1]))
    for t, g in enumerate(grads, start=1):
        g2 = np.asarray(g, np.float64) ** 2
        row += t ** beta2_decay * (g2.mean(axis=1, keepdims=True) - row)
        col += t ** beta2_decay * (g2.mean(axis=0, keepdims=True) - col)
    return row @ col
