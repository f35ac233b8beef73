"""05.2, a constant beta2 = 0.999 with Adam's bias correction instead of Adafactor's 1 - t^-0.8."""
import numpy as np


def adafactor_second_moment(grads, eps1=1e-30, beta2_decay=-0.8):
    row = np.zeros((grads[0].shape[0], 1))
    col = np.zeros((1, grads[0].shape[1]))
    for g in grads:
        g2 = np.asarray(g, np.float64) ** 2
        row = 0.999 * row + 0.001 * g2.mean(axis=1, keepdims=True)
        col = 0.999 * col + 0.001 * g2.mean(axis=0, keepdims=True)
    correction = 1 - 0.999 ** len(grads)
    row, col = row / correction, col / correction
    return row @ col / max(float(row.mean()), eps1)
