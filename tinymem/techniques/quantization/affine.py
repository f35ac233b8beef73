"""The affine map between floats and small integers: r = scale · (q - zero_point).

Jacob et al. 2018. A real number r is stored as an integer q in [quant_min, quant_max]:

    q = clamp(round(r / scale) + zero_point, quant_min, quant_max)      (quantize)
    r' = scale · (q - zero_point)                                        (dequantize)

Inside the range the round trip error is at most scale/2; outside, values are clamped to the
nearest end. The *affine* scheme fits [min, max] (zero_point anywhere, so a post-ReLU tensor
uses all 256 levels); the *symmetric* scheme fixes zero_point (0 for int8, 128 for uint8) and
fits [-max|r|, max|r|], which makes integer matmuls cheaper (no zero-point cross terms).
Per-channel quantization gives every slice along ``axis`` its own scale and zero_point.

Names and defaults follow ``torch.ao.quantization``: dtypes ``"quint8"``/``"uint8"`` (0..255)
and ``"qint8"``/``"int8"`` (-128..127), ``reduce_range`` halves the range (one bit less, which
old x86 int8 kernels needed to avoid overflow in 16-bit intermediate sums), qschemes
``per_tensor_affine``, ``per_tensor_symmetric``, ``per_channel_affine``, ``per_channel_symmetric``.

Memory: an int8 array is 1 byte per element, 4x less than float32; each scale is 4 bytes and
each zero_point 8 bytes (int64, as in PyTorch), per tensor or per channel.
"""
import numpy as np

from ... import backend
from ...autograd import Function, Tensor

QSCHEMES = ("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine", "per_channel_symmetric")
_DTYPES = {"quint8": np.uint8, "uint8": np.uint8, "qint8": np.int8, "int8": np.int8}
EPS = float(np.finfo(np.float32).eps)


def storage_dtype(dtype):
    """The NumPy dtype that stores ``dtype`` ("quint8", "uint8", "qint8", "int8" or a NumPy dtype)."""
    name = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if name not in _DTYPES:
        raise ValueError(f"unsupported quantized dtype {dtype!r}; choose one of {', '.join(_DTYPES)}")
    return np.dtype(_DTYPES[name])


def check_qscheme(qscheme):
    if qscheme not in QSCHEMES:
        raise ValueError(f"unknown qscheme {qscheme!r}; choose one of {', '.join(QSCHEMES)}")
    return qscheme


def qrange(dtype="quint8", reduce_range=False, quant_min=None, quant_max=None):
    """``(quant_min, quant_max)`` exactly as PyTorch's ``calculate_qmin_qmax``.

    Defaults: uint8 0..255 (0..127 with reduce_range), int8 -128..127 (-64..63). Custom
    bounds must contain 0 and fit in 256 levels; reduce_range halves them too (as PyTorch does).
    """
    signed = storage_dtype(dtype) == np.int8
    if (quant_min is None) != (quant_max is None):
        raise ValueError("give both quant_min and quant_max, or neither")
    if quant_min is not None:
        if not quant_min <= 0 <= quant_max or quant_min >= quant_max:
            raise ValueError(f"quant_min={quant_min}, quant_max={quant_max}: the range must "
                             f"contain 0 and quant_min must be < quant_max")
        if quant_max - quant_min + 1 > 256:
            raise ValueError(f"quant range {quant_min}..{quant_max} has more than 256 levels")
        return (quant_min // 2, quant_max // 2) if reduce_range else (quant_min, quant_max)
    if signed:
        return (-64, 63) if reduce_range else (-128, 127)
    return (0, 127) if reduce_range else (0, 255)


def qparams_from_minmax(min_val, max_val, qscheme="per_tensor_affine", dtype="quint8",
                        quant_min=0, quant_max=255, customized_qrange=False, eps=EPS, check=True):
    """Scale (float32) and zero_point (int64) covering [min_val, max_val] as PyTorch computes them.

    The range is first widened to contain 0 (zero must be exact: padding and ReLU produce it).
    Affine: scale = (max - min) / (qmax - qmin), zero_point = qmin - round(min / scale).
    Symmetric: scale = max|r| / ((qmax - qmin) / 2), zero_point 0 (int8) or 128 (uint8).
    Arithmetic is float32, rounding half to even, like ``UniformQuantizationObserverBase``.
    ``check=False`` skips refusing a non-finite or reversed range on a device, where it would read
    the range on the host (two host syncs): for a range finite and ordered by construction, an
    observer's. On the host the check is free and always made (a user may set ``min_val``).
    """
    check_qscheme(qscheme)
    if quant_min >= quant_max or not eps > 0:
        raise ValueError(f"quant_min ({quant_min}) must be below quant_max ({quant_max}) and eps ({eps}) > 0")
    xp = np if isinstance(min_val, (int, float, np.generic)) else backend.array_module(min_val)
    min_val = xp.asarray(min_val, dtype=np.float32)
    max_val = xp.asarray(max_val, dtype=np.float32)
    check = check or xp is np
    if check and not bool(xp.isfinite(min_val).all() & xp.isfinite(max_val).all()):
        raise ValueError(f"min {min_val} and max {max_val} must be finite: a NaN or inf range gives a "
                         "NaN or inf scale (observers ignore non-finite values for this reason)")
    if check and bool(xp.any(min_val > max_val)):
        raise ValueError(f"min {min_val} should not be larger than max {max_val}")
    zero = xp.zeros_like(min_val)
    min_neg = xp.minimum(min_val, zero)
    max_pos = xp.maximum(max_val, zero)
    eps = np.float32(eps)
    if qscheme.endswith("symmetric"):
        max_pos = xp.maximum(-min_neg, max_pos)
        scale = xp.maximum(max_pos / np.float32(float(quant_max - quant_min) / 2), eps)
        zp = 0
        if storage_dtype(dtype) == np.uint8:
            zp = (quant_min + quant_max) // 2 if customized_qrange else 128
        zero_point = xp.full(scale.shape, zp, dtype=np.int64)
    else:
        scale = xp.maximum((max_pos - min_neg) / np.float32(quant_max - quant_min), eps)
        zero_point = quant_min - xp.round(min_neg / scale).astype(np.int64)
        zero_point = xp.clip(zero_point, quant_min, quant_max)
    return scale.reshape(-1).astype(np.float32), zero_point.reshape(-1).astype(np.int64)


def _broadcast(param, x, axis):
    """Reshape a per-channel parameter so it lines up with ``axis`` of ``x`` (scalars pass)."""
    xp = backend.array_module(x)
    param = xp.asarray(param)
    if param.size == 1 and axis is None:
        return param.reshape(())
    if axis is None:
        raise ValueError(f"{param.size} scales/zero_points need an axis (per-channel quantization)")
    axis = axis % x.ndim
    if param.size != x.shape[axis]:
        raise ValueError(f"{param.size} scales for axis {axis} of size {x.shape[axis]}")
    shape = [1] * x.ndim
    shape[axis] = -1
    return param.reshape(shape)


def _check_qparams(scale, zero_point, lo, hi, what):
    """Refuse what would give codes silently wrong: a scale not finite and > 0 (0 gives garbage
    codes or NaN), a zero_point off the integers or outside [lo, hi] (values shift by a clamp).
    Cost: a host copy of the scales and zero points (one sync per call on a GPU)."""
    scale, zero_point = np.asarray(_value(scale), np.float32), _value(zero_point)
    if not bool(np.all(np.isfinite(scale)) and np.all(scale > 0)):
        raise ValueError(f"{what}: scale must be finite and > 0, got {scale}")
    if zero_point.dtype.kind == "f" and not bool(np.all(zero_point == np.round(zero_point))):
        raise ValueError(f"{what}: zero_point must be an integer, got {zero_point}")
    if not bool(np.all((zero_point >= lo) & (zero_point <= hi))):
        raise ValueError(f"{what}: zero_point {zero_point} is outside the range [{lo}, {hi}]")


def _arrays(x, scale, zero_point, axis):
    data = x.data if isinstance(x, Tensor) else x
    xp = backend.array_module(data)
    scale = _broadcast(xp.asarray(scale, dtype=np.float32), data, axis)
    zero_point = _broadcast(xp.asarray(zero_point, dtype=np.int64), data, axis)
    return data, xp, scale, zero_point


def _round_shift(xp, data, scale, zero_point):
    # Multiply by the float32 reciprocal, as PyTorch's kernels do, so near-ties land alike; then
    # round (half to even) *before* adding the zero point, as the formula says and as PyTorch's
    # fake_quantize and ONNX's QuantizeLinear do. Pitfall: torch.quantize_per_tensor's CPU
    # kernel adds the zero point first, so where x / scale is an exact .5 and zero_point is
    # odd its code is one step from ours (and from fake_quantize's).
    inv = (np.float32(1.0) / scale).astype(np.float32)
    return xp.rint(data.astype(np.float32) * inv) + zero_point.astype(np.float32)


def quantize(x, scale, zero_point, dtype="quint8", quant_min=None, quant_max=None, axis=None):
    """Integers ``clamp(round(x / scale) + zero_point, quant_min, quant_max)`` as an int8/uint8 array.

    ``scale``/``zero_point`` are scalars (per tensor) or one per slice along ``axis`` (per
    channel). ``quant_min``/``quant_max`` default to the dtype's full range. Returns a raw array
    (1 byte per element); pass it to :func:`dequantize` with the same parameters.
    """
    lo, hi = qrange(dtype, False, quant_min, quant_max)
    _check_qparams(scale, zero_point, lo, hi, "quantize")
    data, xp, scale, zero_point = _arrays(x, scale, zero_point, axis)
    q = xp.clip(_round_shift(xp, data, scale, zero_point), lo, hi)
    return q.astype(storage_dtype(dtype))


def dequantize(q, scale, zero_point, axis=None):
    """Floats ``scale · (q - zero_point)`` (float32) from integers made by :func:`quantize`."""
    data, xp, scale, zero_point = _arrays(q, scale, zero_point, axis)
    return ((data.astype(np.int32) - zero_point.astype(np.int32)).astype(np.float32) * scale).astype(np.float32)


class FakeQuantize(Function):
    """Quantize then dequantize in float, with the straight-through gradient.

    The forward rounds (its true derivative is zero almost everywhere); the backward passes the
    gradient through unchanged where ``x`` fell inside the representable range and gives zero
    where it was clamped (Bengio et al. 2013; PyTorch's ``fake_quantize_per_tensor_affine``).
    Memory: saves a 1-byte mask per element (B bytes for B elements), not the input.
    """

    def forward(ctx, x, scale, zero_point, quant_min, quant_max, axis):
        xp = backend.array_module(x)
        scale = _broadcast(xp.asarray(scale, dtype=np.float32), x, axis)
        zero_point = _broadcast(xp.asarray(zero_point, dtype=np.int64), x, axis)
        shifted = _round_shift(xp, x, scale, zero_point)
        inside = (shifted >= quant_min) & (shifted <= quant_max)
        ctx.save_for_backward(inside)
        q = xp.clip(shifted, quant_min, quant_max)
        return ((q - zero_point.astype(np.float32)) * scale).astype(x.dtype)

    def backward(ctx, g):
        (inside,) = ctx.saved_tensors
        return g * inside


def fake_quantize(x, scale, zero_point, quant_min=0, quant_max=255, axis=None, check=True):
    """Differentiable quantize-dequantize of a Tensor (PyTorch's ``fake_quantize_per_tensor_affine``
    and, with ``axis``, ``fake_quantize_per_channel_affine``). The gradient is the
    straight-through rule: 1 inside [quant_min, quant_max] after rounding, 0 where clamped.
    ``check=False`` skips refusing bad qparams on a device, where it would copy them to the host
    (one host sync per call): for qparams valid by construction, an observer's, in a training
    step. Host qparams are always checked: there it costs nothing."""
    if quant_min >= quant_max:
        raise ValueError(f"quant_min ({quant_min}) must be smaller than quant_max ({quant_max})")
    if check or not any(hasattr(_raw(v), "__cuda_array_interface__") for v in (scale, zero_point)):
        _check_qparams(scale, zero_point, quant_min, quant_max, "fake_quantize")
    return FakeQuantize.apply(x, scale, zero_point, quant_min, quant_max, axis)


def _raw(v):
    return v.data if isinstance(v, Tensor) else v


def _value(v):
    """A host array of a scale or zero_point given as a number, a list, an array or a Tensor."""
    v = _raw(v)
    return backend.to_numpy(v) if hasattr(v, "__cuda_array_interface__") else np.asarray(v)
