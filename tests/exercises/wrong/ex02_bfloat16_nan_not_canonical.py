"""02.3, NaN left to the rounding: payloads carry into the exponent or keep their own bits."""
import numpy as np


def to_bfloat16_bits(x):
    bits = np.asarray(x, np.float32).view(np.uint32)
    lsb = (bits >> np.uint32(16)) & np.uint32(1)
    return ((bits + np.uint32(0x7FFF) + lsb) >> np.uint32(16)).astype(np.uint16)
