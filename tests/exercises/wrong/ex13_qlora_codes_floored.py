"""13.4a, n // 2 bytes of codes: an odd count of weights loses its last half byte."""
import math


def qlora_parameter_bytes(layers, r):
    total = 0
    for d_in, d_out in layers:
        n, blocks = d_in * d_out, math.ceil(d_in * d_out / 64)
        total += n // 2 + blocks + 4 * math.ceil(blocks / 256) + 4 + 4 * d_out + 4 * r * (d_in + d_out)
    return total
