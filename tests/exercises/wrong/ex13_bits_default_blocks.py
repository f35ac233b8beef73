"""13.3, the library's blocks (64 weights, 256 scales) whatever sizes were asked for."""
import math


def nf4_bits_per_weight(n, block=64, block2=256):
    blocks = math.ceil(n / 64)
    scales = 4 * blocks if block2 is None else blocks + 4 * math.ceil(blocks / 256) + 4
    return 8 * (math.ceil(n / 2) + scales) / n
