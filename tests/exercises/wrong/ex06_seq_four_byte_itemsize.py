"""06_seq.2, float32's 4 bytes written in where the itemsize argument belongs."""


def attention_saved_bytes(batch, heads, L, head_dim, chunked, itemsize=4):
    return solution.attention_saved_bytes(batch, heads, L, head_dim, chunked, 4)  # noqa: F821
