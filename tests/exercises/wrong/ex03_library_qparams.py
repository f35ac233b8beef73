"""03.1, the library's qparams_from_minmax called."""
from tinymem.techniques import quantization as Q


def affine_qparams(min_val, max_val, quant_min=0, quant_max=255):
    dtype = "qint8" if quant_min < 0 else "quint8"
    scale, zero_point = Q.qparams_from_minmax(min_val, max_val, "per_tensor_affine", dtype, quant_min, quant_max)
    return scale[0], int(zero_point[0])
