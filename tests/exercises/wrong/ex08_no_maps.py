"""08.1, Adam8bit's state summed tensor by tensor, without the two maps the optimizer keeps once."""
import math


def model_state_bytes(shapes, precision, optimizer, offload="none"):
    states = solution.model_state_bytes(shapes, precision, optimizer, offload)  # noqa: F821
    if optimizer == "Adam8bit" and offload == "none" and any(math.prod(s) >= 4096 for s in shapes):
        states["optimizer"] -= 2 * 256 * 4
    return states
