"""03.2, the axis ignored: per-channel scales left to NumPy's broadcasting, which aligns the last axis."""
import numpy as np


def fake_quant(x, scale, zero_point, quant_min=0, quant_max=255, axis=None):
    s, z = np.asarray(scale, np.float32), np.asarray(zero_point, np.float32)
    q = np.clip(np.rint(x * (np.float32(1) / s)) + z, quant_min, quant_max)
    return ((q - z) * s).astype(np.float32)
