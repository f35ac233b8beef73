"""03.1, no smallest scale: an all-zero range divides by zero."""
import numpy as np


def affine_qparams(min_val, max_val, quant_min=0, quant_max=255):
    lo, hi = np.float32(min(min_val, 0.0)), np.float32(max(max_val, 0.0))
    scale = (hi - lo) / np.float32(quant_max - quant_min)
    with np.errstate(divide="ignore", invalid="ignore"):
        zero_point = quant_min - np.round(lo / scale)
    zero_point = int(zero_point) if np.isfinite(zero_point) else quant_min
    return np.float32(scale), int(min(max(zero_point, quant_min), quant_max))
