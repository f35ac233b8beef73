"""13.3, double quantization without the float32 mean that was subtracted from the scales."""
import math


def nf4_bits_per_weight(n, double_quant=True):
    if not double_quant:
        return solution.nf4_bits_per_weight(n, False)  # noqa: F821
    blocks = math.ceil(n / 64)
    return 8 * (math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / 256)) / n
