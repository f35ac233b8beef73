"""03.1, the zero point as -round(min / scale): right only when quant_min is 0."""
import numpy as np


def affine_qparams(min_val, max_val, quant_min=0, quant_max=255):
    lo, hi = np.float32(min(min_val, 0.0)), np.float32(max(max_val, 0.0))
    scale = max((hi - lo) / np.float32(quant_max - quant_min), np.finfo(np.float32).eps)
    zero_point = -int(np.round(lo / scale))
    return np.float32(scale), int(min(max(zero_point, quant_min), quant_max))
