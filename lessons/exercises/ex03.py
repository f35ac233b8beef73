"""Lesson 3 exercises: int8 quantization. Replace each body (NumPy only)."""
import numpy as np  # noqa: F401  (you will need it)


def affine_qparams(min_val, max_val, quant_min=0, quant_max=255):
    """(scale, zero_point) exactly as PyTorch's per-tensor affine observers compute them for an
    observed range [min_val, max_val] and the integer range [quant_min, quant_max].
    Return a float32 scalar and a Python int."""
    raise NotImplementedError("exercise 03.1")


def fake_quant(x, scale, zero_point, quant_min=0, quant_max=255, axis=None):
    """Quantize then dequantize the float32 array x (result float32), as PyTorch's
    fake_quantize_per_tensor_affine does; with ``axis``, ``scale`` and ``zero_point`` hold one
    value per slice of x along that axis (fake_quantize_per_channel_affine)."""
    raise NotImplementedError("exercise 03.2")


def fake_quant_grad(x, scale, zero_point, quant_min, quant_max, g, axis=None):
    """The straight-through gradient of fake_quant for the upstream gradient g."""
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
