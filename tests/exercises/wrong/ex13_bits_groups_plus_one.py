"""13.3, one group of scales more than the whole groups (blocks // block2 + 1): one too many
when the block count is a multiple of block2."""
import math


def nf4_bits_per_weight(n, block=64, block2=256):
    if block2 is None:
        return solution.nf4_bits_per_weight(n, block, None)  # noqa: F821
    blocks = math.ceil(n / block)
    return 8 * (math.ceil(n / 2) + blocks + 4 * (blocks // block2 + 1) + 4) / n
