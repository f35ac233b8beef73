"""Lesson 5 reference answers."""
import math

import numpy as np


def state_bytes_for(optimizer, shape):
    n = math.prod(shape)
    if optimizer == "sgd":
        return 0
    if optimizer == "sgd_momentum":
        return 4 * n
    if optimizer == "adam":
        return 8 * n
    if optimizer == "adafactor":
        if len(shape) < 2:
            return 4 * n
        return 4 * (math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1])
    if optimizer == "adam8bit":
        if n < 4096:
            return 8 * n
        return 2 * n + 2 * 4 * math.ceil(n / 2048)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def adafactor_second_moment(grads, eps1=1e-30, beta2_decay=-0.8):
    row = np.zeros((grads[0].shape[0], 1))
    col = np.zeros((1, grads[0].shape[1]))
    for t, g in enumerate(grads, start=1):
        weight = t ** beta2_decay  # 1 - beta2_t: the first step takes g² as it is
        g2 = np.asarray(g, np.float64) ** 2
        row += weight * (g2.mean(axis=1, keepdims=True) - row)
        col += weight * (g2.mean(axis=0, keepdims=True) - col)
    return row @ col / max(float(row.mean()), eps1)


def quantize_block(x, qmap):
    absmax = float(np.abs(x).max())
    normalised = x / absmax if absmax > 0 else x
    codes = np.abs(normalised[..., None] - qmap).argmin(axis=-1)
    return codes.astype(np.uint8), absmax


def lion_step(p, m, g, lr, betas=(0.9, 0.99), weight_decay=0.0):
    direction = np.sign(betas[0] * m + (1 - betas[0]) * g)
    new_p = p * (1 - lr * weight_decay) - lr * direction
    new_m = betas[1] * m + (1 - betas[1]) * g
    return new_p, new_m
