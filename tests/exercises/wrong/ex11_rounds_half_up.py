"""Wrong on purpose (exercise 11.1): rounds halves up (floor(v + 0.5)) instead of to even."""
import numpy as np

TARGET = "onnx_quantize_linear"


def onnx_quantize_linear(x, scale, zero_point):
    q = np.floor(np.asarray(x, np.float32) / np.float32(scale) + 0.5) + zero_point
    return np.clip(q, 0, 255).astype(np.uint8)
