"""00.1, bytes_per_value ignored: float32 assumed."""


def mlp_parameter_bytes(sizes, bytes_per_value=4):
    return 4 * sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
