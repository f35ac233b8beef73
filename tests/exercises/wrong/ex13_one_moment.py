"""13.1, Adam's state counted as one buffer per adapter value instead of two."""


def lora_step_bytes(layers, r, adapted):
    right = solution.lora_step_bytes(layers, r, adapted)  # noqa: F821
    return dict(right, optimizer=right["optimizer"] // 2)
