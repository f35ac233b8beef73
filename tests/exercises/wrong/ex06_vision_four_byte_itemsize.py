"""06_vision.1, float32's 4 bytes written in where the itemsize argument belongs."""


def column_block_bytes(batch, channels, kernel, out_h, out_w, block_elements, itemsize=4):
    return solution.column_block_bytes(batch, channels, kernel, out_h, out_w, block_elements, 4)  # noqa: F821
