"""Wrong on purpose (exercise 12.1): Korthikanti's 16-bit count (dropout masks and outputs,
LayerNorm inputs), which is not tinymem's block."""

TARGET = "layer_activation_bytes"


def layer_activation_bytes(seq, batch, hidden, heads, bytes_per_value):
    return seq * batch * hidden * (34 + 5 * heads * seq / hidden) * bytes_per_value / 2
