"""03.3, the integer matmul the exercise rules out (exact, but NumPy runs it without BLAS)."""
import numpy as np


def exact_int8_matmul(a, b):
    return (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
