"""Wrong on purpose (exercise 12.1): hands the count to the planner's own closed form."""
from tinymem.planner import activations

TARGET = "layer_activation_bytes"


def layer_activation_bytes(seq, batch, hidden, heads, bytes_per_value):
    return activations.activations_per_layer(seq, batch, hidden, heads, storage={4: "fp32", 2: "bf16"}[bytes_per_value])
