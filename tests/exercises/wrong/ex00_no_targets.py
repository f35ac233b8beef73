"""00.2, the loss's saved targets forgotten."""


def mlp_activation_bytes(sizes, batch):
    return 4 * batch * sum(sizes[:-1]) + 4 * batch * sizes[-1]
