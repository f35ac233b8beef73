"""02.3, the low 16 bits dropped without rounding (truncation toward zero)."""
import numpy as np


def to_bfloat16_bits(x):
    x = np.asarray(x, np.float32)
    rounded = (x.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return np.where(np.isnan(x), np.uint16(0x7FC0), rounded)
