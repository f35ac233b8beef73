"""00.2, each ReLU's saved output counted again as the next Linear's saved input."""


def mlp_activation_bytes(sizes, batch):
    hidden = sum(sizes[1:-1])
    return 4 * batch * (sizes[0] + 2 * hidden) + 4 * batch * sizes[-1] + 8 * batch
