"""05.1, every tensor 8-bit, also those under 4096 elements."""
import math


def state_bytes_for(optimizer, shape):
    if optimizer != "adam8bit":
        return solution.state_bytes_for(optimizer, shape)  # noqa: F821
    n = math.prod(shape)
    return 2 * n + 8 * math.ceil(n / 2048)
