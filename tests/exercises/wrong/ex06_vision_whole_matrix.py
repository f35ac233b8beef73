"""06.1, the whole column matrix, as if it were built in one piece."""


def column_block_bytes(batch, channels, kernel, out_h, out_w, block_elements, itemsize=4):
    return channels * kernel * kernel * out_h * out_w * batch * itemsize
