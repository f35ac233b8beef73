"""05.4, the momentum updated first and its sign taken as the step (that is signed momentum SGD, not Lion)."""
import numpy as np


def lion_step(p, m, g, lr, betas=(0.9, 0.99), weight_decay=0.0):
    new_m = betas[1] * m + (1 - betas[1]) * g
    return p * (1 - lr * weight_decay) - lr * np.sign(new_m), new_m
