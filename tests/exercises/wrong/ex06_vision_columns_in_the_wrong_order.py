"""06.2, the column matrix built with the kernel offsets first and the channels second, so its
rows no longer line up with the flattened weight (O, C·k·k)."""
import numpy as np


def conv2d_im2col(x, weight, stride=1, padding=0):
    b, c, h, w = x.shape
    o, _, k, _ = weight.shape
    xpad = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = (h + 2 * padding - k) // stride + 1, (w + 2 * padding - k) // stride + 1
    cols = np.empty((k, k, c, b, oh, ow), x.dtype)
    for i in range(k):
        for j in range(k):
            patch = xpad[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            cols[i, j] = patch.transpose(1, 0, 2, 3)
    out = weight.reshape(o, -1) @ cols.reshape(c * k * k, -1)
    return out.reshape(o, b, oh, ow).transpose(1, 0, 2, 3)
