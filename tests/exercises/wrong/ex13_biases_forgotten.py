"""13.1, the frozen Linears' biases left out of the parameter bucket."""


def lora_step_bytes(layers, r, adapted):
    right = solution.lora_step_bytes(layers, r, adapted)  # noqa: F821
    return dict(right, parameter=right["parameter"] - sum(4 * d_out for _, d_out in layers))
