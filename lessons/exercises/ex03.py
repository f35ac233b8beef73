"""Lesson 3 exercises: int8 quantization. Replace each body (NumPy only)."""
import numpy as np  # noqa: F401  (you will need it)


def affine_qparams(min_val, max_val, quant_min=0, quant_max=255):
    """(scale, zero_point) as PyTorch's per-tensor affine observers compute them: widen
    [min_val, max_val] to contain 0, scale = (max - min) / (quant_max - quant_min) in float32
    (at least float32 eps), zero_point = quant_min - round(min / scale), clamped to the range.
    Return a float32 scalar and a Python int."""
    raise NotImplementedError("exercise 03.1")


def fake_quant(x, scale, zero_point, quant_min=0, quant_max=255):
    """Quantize then dequantize the float32 array x (result float32)."""
    raise NotImplementedError("exercise 03.2")


def fake_quant_grad(x, scale, zero_point, quant_min, quant_max, g):
    """The straight-through gradient of fake_quant: g where round(x / scale) + zero_point lies
    in [quant_min, quant_max], 0 where it was clamped."""
    raise NotImplementedError("exercise 03.2")


def exact_int8_matmul(a, b):
    """a @ b for int8 arrays a (M, K) and b (K, N), exactly, as int32, using float32 matmuls
    only (no integer matmul). K may be up to 100,000."""
    raise NotImplementedError("exercise 03.3")


def pack_2bit(codes):
    """Pack a uint8 array of values 0..3 (length a multiple of 4) four to a byte: code i of a
    group of four goes to bits 2i and 2i+1."""
    raise NotImplementedError("exercise 03.4")


def unpack_2bit(packed, n):
    """The first n codes packed by pack_2bit, as uint8."""
    raise NotImplementedError("exercise 03.4")
