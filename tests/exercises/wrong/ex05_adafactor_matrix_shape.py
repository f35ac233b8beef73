"""05.1, Adafactor's factors for more than two dimensions taken as one row and one column of the whole tensor."""
import math


def state_bytes_for(optimizer, shape):
    if optimizer != "adafactor" or len(shape) < 2:
        return solution.state_bytes_for(optimizer, shape)  # noqa: F821
    return 4 * (shape[0] + math.prod(shape[1:]))
