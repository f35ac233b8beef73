"""13.3, double quantization without the float32 mean that was subtracted from the scales."""
import math


def nf4_bits_per_weight(n, block=64, block2=256):
    if block2 is None:
        return solution.nf4_bits_per_weight(n, block, None)  # noqa: F821
    blocks = math.ceil(n / block)
    return 8 * (math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / block2)) / n
