"""03.3, chunks of 2048: 2048 products of 128·128 reach 2**25."""
import numpy as np


def exact_int8_matmul(a, b):
    out = np.zeros((a.shape[0], b.shape[1]), np.int32)
    for start in range(0, a.shape[1], 2048):
        out += (a[:, start:start + 2048].astype(np.float32) @ b[start:start + 2048].astype(np.float32)).astype(np.int32)
    return out
