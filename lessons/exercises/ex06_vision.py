"""Lesson 6 (vision) exercises: the blocks of im2col, convolution by im2col, micro-batch weights,
the batch-size search. Replace each body."""


def column_block_bytes(batch, channels, kernel, out_h, out_w, block_elements, itemsize=4):
    """Bytes of the largest block of the im2col column matrix that tinymem's conv2d builds
    (tinymem/ops/conv.py) for a square ``kernel``, when a block may hold at most
    ``block_elements`` values: whole samples when one sample's columns fit, else bands of
    output rows of one sample (at least one row)."""
    raise NotImplementedError("exercise 06.1")


def conv2d_im2col(x, weight, stride=1, padding=0):
    """Conv2d (no bias) of a NumPy array x (B, C, H, W) with weight (O, C, k, k) by im2col:
    build the (C·k·k, B·OH·OW) column matrix, one matrix product, reshape to (B, O, OH, OW)."""
    raise NotImplementedError("exercise 06.2")


def microbatch_weights(sizes):
    """The factor each micro-batch's mean loss must be multiplied by (sizes n_1..n_k) so that
    the accumulated gradient is the full batch's."""
    raise NotImplementedError("exercise 06.3")


def largest_fitting(fits, good, bad):
    """Largest n with fits(n) True, knowing fits(good) is True and fits(bad) is False
    (good < bad, fits monotone). Use about log2(bad - good) calls."""
    raise NotImplementedError("exercise 06.4")
