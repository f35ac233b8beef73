"""00.1, one bias per input feature instead of per output feature."""


def mlp_parameter_bytes(sizes, bytes_per_value=4):
    return bytes_per_value * sum(a * b + a for a, b in zip(sizes[:-1], sizes[1:]))
