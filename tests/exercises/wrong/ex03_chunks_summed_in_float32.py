"""03.3, exact chunks, but their results added up in float32."""
import numpy as np


def exact_int8_matmul(a, b):
    out = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for start in range(0, a.shape[1], 1024):
        out += a[:, start:start + 1024].astype(np.float32) @ b[start:start + 1024].astype(np.float32)
    return out.astype(np.int32)
