"""03.4, code i of a group put in the high bits first (bits 6 - 2i)."""
import numpy as np


def pack_2bit(codes):
    c = codes.reshape(-1, 4).astype(np.uint8)
    return (c[:, 3] | (c[:, 2] << 2) | (c[:, 1] << 4) | (c[:, 0] << 6)).astype(np.uint8)
