"""13.3, whole blocks only: the short last block (and the short last group of scales) gets no scale."""


def nf4_bits_per_weight(n, block=64, block2=256):
    blocks = n // block
    scales = 4 * blocks if block2 is None else blocks + 4 * (blocks // block2) + 4
    return 8 * ((n + 1) // 2 + scales) / n
