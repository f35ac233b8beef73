"""Wrong answer to 07.1: optimizer state counted as momentum and variance only (8 bytes, no fp32 master)."""
TARGET = "zero_bytes_per_device"


def zero_bytes_per_device(params, world_size, stage):
    weight, grad, state = 2 * params, 2 * params, 8 * params
    if stage >= 1:
        state /= world_size
    if stage >= 2:
        grad /= world_size
    if stage >= 3:
        weight /= world_size
    return weight + grad + state
