"""Lesson 3 reference answers: int8 quantization."""
import numpy as np


def affine_qparams(min_val, max_val, quant_min=0, quant_max=255):
    lo = np.float32(min(min_val, 0.0))
    hi = np.float32(max(max_val, 0.0))
    scale = max((hi - lo) / np.float32(quant_max - quant_min), np.finfo(np.float32).eps)
    zero_point = quant_min - int(np.round(lo / scale))
    return np.float32(scale), int(min(max(zero_point, quant_min), quant_max))


def _per_slice(value, x, axis, dtype):
    """A scalar, or one value per slice along ``axis`` shaped to broadcast against x."""
    value = np.asarray(value, dtype)
    if axis is None:
        return value
    shape = [1] * x.ndim
    shape[axis] = -1
    return value.reshape(shape)


def _shifted(x, scale, zero_point, axis):
    # PyTorch multiplies by the float32 reciprocal of the scale (ties then break as it does)
    inv = (np.float32(1.0) / _per_slice(scale, x, axis, np.float32)).astype(np.float32)
    return np.rint(x.astype(np.float32) * inv) + _per_slice(zero_point, x, axis, np.float32)


def fake_quant(x, scale, zero_point, quant_min=0, quant_max=255, axis=None):
    q = np.clip(_shifted(x, scale, zero_point, axis), quant_min, quant_max)
    zero = _per_slice(zero_point, x, axis, np.float32)
    return ((q - zero) * _per_slice(scale, x, axis, np.float32)).astype(np.float32)


def fake_quant_grad(x, scale, zero_point, quant_min, quant_max, g, axis=None):
    q = _shifted(x, scale, zero_point, axis)
    return g * ((q >= quant_min) & (q <= quant_max))


def exact_int8_matmul(a, b):
    # Partial sums of 1024 int8 products stay within 1024·128·128 = 2**24: exact in float32.
    out = np.zeros((a.shape[0], b.shape[1]), np.int32)
    for start in range(0, a.shape[1], 1024):
        part = a[:, start:start + 1024].astype(np.float32) @ b[start:start + 1024].astype(np.float32)
        out += part.astype(np.int32)
    return out


def pack_2bit(codes):
    c = codes.reshape(-1, 4).astype(np.uint8)
    return (c[:, 0] | (c[:, 1] << 2) | (c[:, 2] << 4) | (c[:, 3] << 6)).astype(np.uint8)


def unpack_2bit(packed, n):
    shifts = np.array([0, 2, 4, 6], np.uint8)
    return ((packed[:, None] >> shifts) & 3).astype(np.uint8).reshape(-1)[:n]
