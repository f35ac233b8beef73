"""08.1, optimizer offload ignored: the state still counted on the device."""


def model_state_bytes(shapes, precision, optimizer, offload="none"):
    return solution.model_state_bytes(shapes, precision, optimizer, "none")  # noqa: F821 (given by the loader)
