"""13.4a, NF4 priced at half a byte per weight: the block scales forgotten."""


def qlora_parameter_bytes(layers, r):
    return sum(d_in * d_out // 2 + 4 * d_out + 4 * r * (d_in + d_out) for d_in, d_out in layers)
