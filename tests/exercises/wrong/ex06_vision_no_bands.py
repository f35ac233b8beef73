"""06.1, whole samples only: a sample too big for the limit is built whole anyway."""


def column_block_bytes(batch, channels, kernel, out_h, out_w, block_elements, itemsize=4):
    per_sample = channels * kernel * kernel * out_w * out_h
    samples = min(batch, max(1, block_elements // per_sample))
    return samples * per_sample * itemsize
