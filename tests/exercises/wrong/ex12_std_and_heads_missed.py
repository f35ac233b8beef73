"""Wrong on purpose (exercise 12.1): the 1/std vectors of the two LayerNorms and the per-head
attention weights forgotten (one s x s matrix per sequence)."""

TARGET = "layer_activation_bytes"


def layer_activation_bytes(seq, batch, hidden, heads, bytes_per_value):
    n = batch * seq
    return bytes_per_value * (16 * n * hidden + batch * seq * seq)
