"""04.1, the weights each Linear saves counted as written (offload leaves resident parameters alone)."""


def offloaded_bytes(sizes, batch):
    weights = sum(4 * a * b for a, b in zip(sizes[:-1], sizes[1:]))
    return 4 * batch * sum(sizes[:-1]) + 4 * batch * sizes[-1] + 8 * batch + weights
