"""13.4a, each weight quantized by the library and weighed, instead of counted."""
import numpy as np


def qlora_parameter_bytes(layers, r):
    from tinymem.techniques.lora import quantize_absmax, quantize_nf4
    total = 0
    for d_in, d_out in layers:
        packed, absmax = quantize_nf4(np.ones(d_in * d_out, np.float32))
        total += packed.nbytes + sum(a.nbytes for a in quantize_absmax(absmax)) + 4 * d_out + 4 * r * (d_in + d_out)
    return total
