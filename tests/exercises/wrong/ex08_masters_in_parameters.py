"""08.1, the fp32 masters of a half model counted in the parameter bucket instead of the optimizer's."""
import math


def model_state_bytes(shapes, precision, optimizer, offload="none"):
    states = solution.model_state_bytes(shapes, precision, optimizer, offload)  # noqa: F821
    if precision != "fp32":
        masters = 4 * sum(math.prod(s) for s in shapes)
        states["optimizer"] -= masters
        states["parameter"] += masters
    return states
