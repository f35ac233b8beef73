"""00.1, the biases forgotten: only the weight matrices."""


def mlp_parameter_bytes(sizes, bytes_per_value=4):
    return bytes_per_value * sum(a * b for a, b in zip(sizes[:-1], sizes[1:]))
