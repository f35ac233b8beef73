"""13.1, an adapter priced on every Linear, whichever were chosen."""


def lora_step_bytes(layers, r, adapted):
    return solution.lora_step_bytes(layers, r, range(len(layers)))  # noqa: F821
