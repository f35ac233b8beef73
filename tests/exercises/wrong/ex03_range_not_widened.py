"""03.1, the observed range used as it is: 0.0 may fall outside it and not be exact."""
import numpy as np


def affine_qparams(min_val, max_val, quant_min=0, quant_max=255):
    lo, hi = np.float32(min_val), np.float32(max_val)
    scale = max((hi - lo) / np.float32(quant_max - quant_min), np.finfo(np.float32).eps)
    zero_point = quant_min - int(np.round(lo / scale))
    return np.float32(scale), int(min(max(zero_point, quant_min), quant_max))
