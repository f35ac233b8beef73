"""05.1, the number of blocks rounded down: the last, partial block gets no scale."""
import math


def state_bytes_for(optimizer, shape):
    n = math.prod(shape)
    if optimizer != "adam8bit" or n < 4096:
        return solution.state_bytes_for(optimizer, shape)  # noqa: F821
    return 2 * n + 8 * (n // 2048)
