"""03.3, chunks sized for 127·127 (1040 of them stay below 2**24), forgetting -128·-128 = 2**14."""
import numpy as np


def exact_int8_matmul(a, b):
    out = np.zeros((a.shape[0], b.shape[1]), np.int32)
    for start in range(0, a.shape[1], 1040):
        out += (a[:, start:start + 1040].astype(np.float32) @ b[start:start + 1040].astype(np.float32)).astype(np.int32)
    return out
