"""05.4, Lion's update written into the caller's p and m (as an optimizer's step does), which
the exercise asks to leave untouched."""
import numpy as np


def lion_step(p, m, g, lr, betas=(0.9, 0.99), weight_decay=0.0):
    direction = np.sign(betas[0] * m + (1 - betas[0]) * g)
    p *= 1 - lr * weight_decay
    p -= lr * direction
    m *= betas[1]
    m += (1 - betas[1]) * g
    return p, m
