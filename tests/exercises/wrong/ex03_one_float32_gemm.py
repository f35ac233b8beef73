"""03.3, one float32 matmul for all of K: partial sums past 2**24 lose their low bits."""
import numpy as np


def exact_int8_matmul(a, b):
    return (a.astype(np.float32) @ b.astype(np.float32)).astype(np.int32)
