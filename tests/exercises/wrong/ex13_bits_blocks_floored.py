"""13.3, whole blocks only: the short last block of 64 (and of 256 scales) gets no scale."""


def nf4_bits_per_weight(n, double_quant=True):
    blocks = n // 64
    scales = blocks + 4 * (blocks // 256) + 4 if double_quant else 4 * blocks
    return 8 * ((n + 1) // 2 + scales) / n
