"""05.3, searchsorted's insertion point taken as the code: every value rounds to the map entry below."""
import numpy as np


def quantize_block(x, qmap):
    absmax = float(np.abs(x).max())
    codes = np.clip(np.searchsorted(qmap, x / absmax) - 1, 0, len(qmap) - 1)
    return codes.astype(np.uint8), absmax
