"""Wrong on purpose (exercise 11.1): x · (1/scale), tinymem's and PyTorch's rule, is not ONNX's
x / scale: the two differ by one step where the quotient lands on a rounding tie."""
import numpy as np

TARGET = "onnx_quantize_linear"


def onnx_quantize_linear(x, scale, zero_point):
    q = np.rint(np.asarray(x, np.float32) * (np.float32(1) / np.float32(scale))) + zero_point
    return np.clip(q, 0, 255).astype(np.uint8)
