"""Lesson 0 exercises: the memory buckets of an MLP, by formula. Replace each body."""


def mlp_parameter_bytes(sizes, bytes_per_value=4):
    """Bytes of the weights and biases of tinymem.models.MLP(sizes)."""
    raise NotImplementedError("exercise 00.1")


def adam_step_bytes(sizes, batch):
    """{"parameter": ..., "gradient": ..., "optimizer": ...} after one Adam step (float32)."""
    raise NotImplementedError("exercise 00.2")


def mlp_activation_bytes(sizes, batch):
    """Activation bytes alive at the end of forward: MLP(sizes) (ReLU) + cross-entropy loss."""
    raise NotImplementedError("exercise 00.3")
