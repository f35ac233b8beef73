"""13.3, the arrays quantized by the library and weighed, instead of counted."""
import numpy as np


def nf4_bits_per_weight(n, block=64, block2=256):
    from tinymem.techniques.lora import quantize_absmax, quantize_nf4
    packed, absmax = quantize_nf4(np.ones(n, np.float32), block)
    scales = absmax.nbytes if block2 is None else sum(a.nbytes for a in quantize_absmax(absmax, block2))
    return 8 * (packed.nbytes + scales) / n
