"""Lesson 2 exercises: reference answers."""
import math

import numpy as np


def fp16_fields(x):
    bits = int(np.float16(x).view(np.uint16))
    return bits >> 15, (bits >> 10) & 0x1F, bits & 0x3FF


def fp16_value(sign, exponent, mantissa):
    s = -1.0 if sign else 1.0
    if exponent == 31:
        return s * math.inf if mantissa == 0 else math.nan
    if exponent == 0:
        return s * (mantissa / 1024) * 2.0 ** -14
    return s * (1 + mantissa / 1024) * 2.0 ** (exponent - 15)


def to_bfloat16_bits(x):
    x = np.asarray(x, np.float32)
    bits = x.view(np.uint32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)


def update_scale(scale, growth_tracker, found_inf, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000):
    if found_inf:
        return scale * backoff_factor, 0
    growth_tracker += 1
    if growth_tracker == growth_interval:
        return scale * growth_factor, 0
    return scale, growth_tracker


def largest_safe_scale(max_abs_grad):
    exponent = math.floor(math.log2(65520.0 / max_abs_grad))
    while max_abs_grad * 2.0 ** exponent >= 65520.0:
        exponent -= 1
    while max_abs_grad * 2.0 ** (exponent + 1) < 65520.0:
        exponent += 1
    return 2.0 ** exponent
