"""00.2, the targets taken as 4-byte integers (they are int64)."""


def mlp_activation_bytes(sizes, batch):
    return 4 * batch * sum(sizes[:-1]) + 4 * batch * sizes[-1] + 4 * batch
