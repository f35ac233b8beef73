"""05.4, the weight decay applied after the signed step instead of before it."""
import numpy as np


def lion_step(p, m, g, lr, betas=(0.9, 0.99), weight_decay=0.0):
    direction = np.sign(betas[0] * m + (1 - betas[0]) * g)
    return (p - lr * direction) * (1 - lr * weight_decay), betas[1] * m + (1 - betas[1]) * g
