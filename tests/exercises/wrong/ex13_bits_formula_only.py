"""13.3, the asymptotic formula 4 + 8/64 + 32/(64·256) (or 4 + 32/64) for every n."""


def nf4_bits_per_weight(n, double_quant=True):
    return 4 + 8 / 64 + 32 / (64 * 256) if double_quant else 4 + 32 / 64
