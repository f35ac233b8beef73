"""13.1, the Linears without an adapter still trained in full (gradient and Adam's two moments)."""


def lora_step_bytes(layers, r, adapted):
    right = solution.lora_step_bytes(layers, r, adapted)  # noqa: F821
    trained = sum(4 * (d_in * d_out + d_out) for i, (d_in, d_out) in enumerate(layers) if i not in adapted)
    return dict(right, gradient=right["gradient"] + trained, optimizer=right["optimizer"] + 2 * trained)
