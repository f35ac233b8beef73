"""06.1, the whole matrix capped at the limit, forgetting that blocks hold whole samples or whole rows."""


def column_block_bytes(batch, channels, kernel, out_h, out_w, block_elements, itemsize=4):
    return min(channels * kernel * kernel * out_h * out_w * batch, block_elements) * itemsize
