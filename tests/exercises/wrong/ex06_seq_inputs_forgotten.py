"""06.2, only the attention-specific arrays counted, not the q, k, v both ops keep."""


def attention_saved_bytes(batch, heads, L, head_dim, chunked, itemsize=4):
    n = batch * heads
    return itemsize * n * (L * head_dim + L) if chunked else itemsize * n * L * L
