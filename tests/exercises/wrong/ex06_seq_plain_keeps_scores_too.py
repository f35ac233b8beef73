"""06.2, the plain op counted as keeping the scores as well as the weights (two L x L matrices)."""


def attention_saved_bytes(batch, heads, L, head_dim, chunked, itemsize=4):
    n = batch * heads
    if chunked:
        return itemsize * n * (4 * L * head_dim + L)
    return itemsize * n * (3 * L * head_dim + 2 * L * L)
