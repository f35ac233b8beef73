"""04.1, the array a ReLU saves and the next Linear saves counted twice, as if written twice."""


def offloaded_bytes(sizes, batch):
    hidden = sum(sizes[1:-1])
    return 4 * batch * (sizes[0] + 2 * hidden) + 4 * batch * sizes[-1] + 8 * batch
