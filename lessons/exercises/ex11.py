"""Lesson 11 exercises: ONNX's quantize, tracing a tile back, and inference memory. Replace each
body (NumPy only)."""
import numpy as np  # noqa: F401  (you will need it)


def onnx_quantize_linear(x, scale, zero_point):
    """ONNX's QuantizeLinear to uint8: saturate(round(x / scale) + zero_point), rounding half to
    even, dividing (not multiplying by 1/scale), saturating to 0..255. x is float32."""
    raise NotImplementedError("exercise 11.1")


def input_rows(a, b, layers):
    """The input rows [lo, hi) that output rows [a, b) of a chain of ``layers`` read, before
    clipping to the image (lo may be negative: those rows are zero padding). ``layers`` is a
    list of (kernel, stride, padding), first layer first."""
    raise NotImplementedError("exercise 11.2")


def layer_by_layer_peak(shapes, bytes_per_element=4):
    """Peak activation bytes when a chain runs layer by layer, freeing each input as soon as the
    layer's output exists: ``shapes`` are the input's shape then each layer's output shape.
    Ignore workspace: peak = max over layers of (input + output)."""
    raise NotImplementedError("exercise 11.3")


def recomputed_fraction(size, tiles, layers):
    """1-D patch-based execution of ``layers`` (list of (kernel, stride, padding)) on an input of
    ``size`` positions. The last layer's output, of E positions, is cut into ``tiles`` ranges
    [t·E // tiles, (t+1)·E // tiles); each tile computes, at every layer, the output positions
    its range needs, clipped to that layer's output. Return (positions computed over all tiles
    and layers) / (positions of the whole-layer run, every layer's output once) - 1."""
    raise NotImplementedError("exercise 11.4")
