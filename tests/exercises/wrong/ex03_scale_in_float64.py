"""03.1, the scale and zero point computed in float64 and the scale cast to float32 at the end
(PyTorch's observers compute both in float32)."""
import numpy as np


def affine_qparams(min_val, max_val, quant_min=0, quant_max=255):
    lo, hi = float(min(min_val, 0.0)), float(max(max_val, 0.0))
    scale = max((hi - lo) / (quant_max - quant_min), float(np.finfo(np.float32).eps))
    zero_point = quant_min - int(np.round(lo / scale))
    return np.float32(scale), int(min(max(zero_point, quant_min), quant_max))
