"""06.2, chunked attention counted without the one log-sum-exp per row it keeps for backward."""


def attention_saved_bytes(batch, heads, L, head_dim, chunked, itemsize=4):
    n = batch * heads
    if chunked:
        return itemsize * n * 4 * L * head_dim
    return itemsize * n * (3 * L * head_dim + L * L)
