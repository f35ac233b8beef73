"""Lesson 11 reference answers: ONNX's quantize, tracing a tile back, and inference memory."""
import math

import numpy as np


def onnx_quantize_linear(x, scale, zero_point):
    q = np.rint(np.asarray(x, np.float32) / np.float32(scale)) + zero_point
    return np.clip(q, 0, 255).astype(np.uint8)


def input_rows(a, b, layers):
    for kernel, stride, padding in reversed(layers):
        a, b = a * stride - padding, (b - 1) * stride - padding + kernel
    return a, b


def layer_by_layer_peak(shapes, bytes_per_element=4):
    sizes = [math.prod(s) * bytes_per_element for s in shapes]
    return max(i + o for i, o in zip(sizes[:-1], sizes[1:]))


def recomputed_fraction(size, tiles, layers):
    sizes = [size]
    for kernel, stride, padding in layers:
        sizes.append((sizes[-1] + 2 * padding - kernel) // stride + 1)
    extent, computed = sizes[-1], 0
    for t in range(tiles):
        a, b = t * extent // tiles, (t + 1) * extent // tiles
        for (kernel, stride, padding), in_size in zip(reversed(layers), reversed(sizes[:-1])):
            computed += b - a
            a, b = max(a * stride - padding, 0), min((b - 1) * stride - padding + kernel, in_size)
    return computed / sum(sizes[1:]) - 1
