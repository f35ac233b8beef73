"""03.2, the straight-through mask taken after clamping: every value looks inside, g passes everywhere."""
import numpy as np


def fake_quant_grad(x, scale, zero_point, quant_min, quant_max, g, axis=None):
    q = np.clip(np.rint(x / np.asarray(scale, np.float32)), quant_min, quant_max)
    return g * ((q >= quant_min) & (q <= quant_max))
