"""03.2, the library's fake_quantize called."""
import tinymem as tm
from tinymem.techniques import quantization as Q


def fake_quant(x, scale, zero_point, quant_min=0, quant_max=255, axis=None):
    return Q.fake_quantize(tm.tensor(x), scale, zero_point, quant_min, quant_max, axis=axis).numpy()
