"""Lesson 0 reference answers."""


def mlp_parameter_bytes(sizes, bytes_per_value=4):
    return bytes_per_value * sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def adam_step_bytes(sizes, batch):
    p = mlp_parameter_bytes(sizes)
    return {"parameter": p, "gradient": p, "optimizer": 2 * p}


def mlp_activation_bytes(sizes, batch):
    # Each Linear saves its input; each ReLU saves its output, which is the next Linear's
    # input (one array, counted once); the loss saves probabilities and int64 targets.
    return 4 * batch * sum(sizes[:-1]) + 4 * batch * sizes[-1] + 8 * batch
