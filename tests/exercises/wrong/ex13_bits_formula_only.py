"""13.3, the large-n formula 4 + 8/block + 32/(block·block2) (or 4 + 32/block) for every n."""


def nf4_bits_per_weight(n, block=64, block2=256):
    return 4 + 32 / block if block2 is None else 4 + 8 / block + 32 / (block * block2)
