"""Quantized layers: an exact integer matmul, QuantizedLinear, post-training quantization, QAT.

**The float-GEMM trick.** NumPy has no integer BLAS: an int32 (1024 x 1024) @ (1024 x 1024)
takes seconds, while float32 runs at BLAS speed. int8 values are exact float32 numbers, and so
is every integer of magnitude up to 2**24 (float32 has a 24-bit significand). A dot product of K
int8 pairs has partial sums bounded by K · 128 · 128 = K · 2**14, so for K <= 1024 *every*
partial sum, in whatever order BLAS adds them, is an integer below 2**24 and is computed
exactly: the float32 GEMM returns exactly the int32 accumulation an int8 kernel would. For
larger K, :func:`int_matmul` splits K into chunks of 1024, multiplies each exactly in float32
and adds the chunk results in int32 (exact while the total fits in int32: K <= 131072). On
CuPy the same code runs on cuBLAS; keep TF32 off (CuPy's default) or the products are rounded.

uint8 activations (0..255) are shifted to int8 (-128..127) first, so the bound above holds, and
the zero points come back as a per-column correction:

    sum_k (qx_k - zx) qw_k = sum_k (qx_k - 128) qw_k + (128 - zx) · sum_k qw_k

**QuantizedLinear** stores the weight as int8 (symmetric, per tensor or per output channel: 1
byte per weight, 4x less than float32), keeps the bias in float32, quantizes its input with
the calibrated activation (scale, zero_point), accumulates in int32 and rescales to float32:
y = sx · sw · acc + b. It is an inference layer: no gradient flows through it.

**Post-training quantization**: :func:`prepare` puts an observer in front of every Linear,
:func:`calibrate` runs N batches through the model, :func:`convert` swaps each observed Linear
for a QuantizedLinear. Unlike PyTorch's ``prepare``/``convert`` these work in place.
"""
import numpy as np

from ... import backend, memory, nn
from ... import functional as F
from ...autograd import Tensor, no_grad
from .affine import fake_quantize, quantize, qrange
from .observers import MinMaxObserver, MovingAverageMinMaxObserver, PerChannelMinMaxObserver

EXACT_K = 1024  # 1024 · 128 · 128 = 2**24: the largest K a float32 int8 dot product is exact for


def int_matmul(a, b):
    """Exact int32 ``a @ b`` of int8 arrays (…, K) @ (K, N), through float32 GEMMs.

    Exact for any K up to 131072 (int32 range): K is cut into chunks of ``EXACT_K`` = 1024,
    each multiplied in float32 (exact, see the module docstring) and summed in int32.
    Memory: float32 copies of both operands (4 bytes per element) plus the float32 result.
    """
    if a.dtype != np.int8 or b.dtype != np.int8:
        raise TypeError(f"int_matmul takes int8 arrays, got {a.dtype} and {b.dtype}")
    k = a.shape[-1]
    if k != b.shape[0]:
        raise ValueError(f"int_matmul: shapes {a.shape} and {b.shape} do not fit ({k} != {b.shape[0]})")
    if k > 131072:
        raise ValueError(f"int_matmul: K={k} could overflow the int32 accumulator (limit 131072)")
    xp = backend.array_module(a)
    out = None
    for start in range(0, max(k, 1), EXACT_K):
        part = a[..., start:start + EXACT_K].astype(np.float32) @ b[start:start + EXACT_K].astype(np.float32)
        part = part.astype(np.int32)
        out = part if out is None else out + part
    return out if out is not None else xp.zeros(a.shape[:-1] + b.shape[1:], np.int32)


class QuantizedLinear(nn.Module):
    """y = sx · sw · (int8 x @ int8 W^T) + b, from a float Linear and calibrated observers.

    Memory (``parameter`` bucket): out·in bytes of int8 weight, 4·out of float32 bias, and 4 bytes
    of weight scale per tensor or per output channel, against 4·(out·in + out) for the Linear.
    Per call it makes the quantized input (1 byte per element) and float32 GEMM operands.
    """

    def __init__(self, weight_q, weight_scale, bias, input_scale, input_zero_point,
                 input_dtype="quint8", input_qrange=None):
        super().__init__()
        self.out_features, self.in_features = weight_q.shape
        self.weight = nn.Parameter(weight_q, requires_grad=False)
        self.bias = nn.Parameter(bias, requires_grad=False) if bias is not None else None
        xp = backend.array_module(weight_q)
        self.weight_scale = memory.register(xp.asarray(weight_scale, dtype=np.float32).reshape(-1), "parameter")
        self.input_scale = float(np.asarray(backend.to_numpy(input_scale)).reshape(-1)[0])
        self.input_zero_point = int(np.asarray(backend.to_numpy(input_zero_point)).reshape(-1)[0])
        self.input_dtype = input_dtype
        self.input_qrange = input_qrange or qrange(input_dtype)
        # Column sums of the weight, for the zero-point correction (int32, 4·out bytes).
        self.weight_colsum = memory.register(weight_q.astype(np.int32).sum(axis=1), "parameter")

    @classmethod
    def from_float(cls, linear, input_observer, per_channel=False):
        """Quantize ``linear``'s weight (symmetric int8, per tensor or per output channel, as
        PyTorch's default weight observers do) with the input range ``input_observer`` saw."""
        w = linear.weight.data
        if per_channel:
            wobs = PerChannelMinMaxObserver(ch_axis=0, dtype="qint8", qscheme="per_channel_symmetric")
        else:
            wobs = MinMaxObserver(dtype="qint8", qscheme="per_tensor_symmetric")
        wobs(w)
        w_scale, w_zp = wobs.calculate_qparams()
        w_q = quantize(w, w_scale, w_zp, "qint8", axis=0 if per_channel else None)
        x_scale, x_zp = input_observer.calculate_qparams()
        bias = linear.bias.data.copy() if linear.bias is not None else None
        return cls(w_q, w_scale, bias, x_scale, x_zp, input_observer.dtype,
                   (input_observer.quant_min, input_observer.quant_max))

    def forward(self, x):
        data = x.data if isinstance(x, Tensor) else x
        lo, hi = self.input_qrange
        q = quantize(data, self.input_scale, self.input_zero_point, self.input_dtype, lo, hi)
        if q.dtype == np.uint8:
            shift = 128
            a = (q.astype(np.int16) - shift).astype(np.int8)
        else:
            shift = 0
            a = q
        acc = int_matmul(a, self.weight.data.T)
        acc = acc + (shift - self.input_zero_point) * self.weight_colsum
        y = acc.astype(np.float32) * (np.float32(self.input_scale) * self.weight_scale)
        if self.bias is not None:
            y = y + self.bias.data
        return Tensor(y.astype(np.float32))

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"input_scale={self.input_scale:.4g}, input_zero_point={self.input_zero_point}, "
                f"per_channel={self.weight_scale.size > 1}")


class ObservedLinear(nn.Module):
    """A Linear with an observer on its input: what :func:`prepare` puts in the model."""

    def __init__(self, linear, observer):
        super().__init__()
        self.linear, self.observer = linear, observer

    def forward(self, x):
        self.observer(x)
        return self.linear(x)


def _swap(model, kind, make):
    """Replace every sub-module of type ``kind`` by ``make(module)``, in place.

    The new module takes the old one's slot in the parent's ordered sub-modules
    (``Module.replace_child``), so a Sequential still runs its layers in order.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"quantization works on an nn.Module (its Linear layers are swapped), got a "
                        f"{type(model).__name__}")
    for _, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            if type(child) is kind:
                parent.replace_child(name, make(child))
    return model


def prepare(model, observer=MinMaxObserver):
    """Put ``observer()`` (a class or a factory) in front of every Linear of ``model``, in place."""
    if isinstance(model, nn.Linear):
        raise TypeError("prepare() needs a model containing Linear layers, not a bare Linear; "
                        "wrap it in nn.Sequential")
    return _swap(model, nn.Linear, lambda lin: ObservedLinear(lin, observer()))


def calibrate(model, batches):
    """Run ``batches`` (Tensors or arrays, or (x, y) tuples) through ``model`` without a graph.
    A NumPy batch is copied to the model's device (one batch at a time: one batch of memory)."""
    if hasattr(batches, "shape"):  # iterating one batch would calibrate on its rows, one by one
        raise TypeError(f"calibrate() takes an iterable of batches, got one {type(batches).__name__} of shape "
                        f"{tuple(batches.shape)}: pass [x] or a DataLoader")
    first = next(iter(model.parameters()), None)
    device = first.device if first is not None else None
    n = 0
    with no_grad():
        for batch in batches:
            x = batch[0] if isinstance(batch, (tuple, list)) else batch
            on_host = not hasattr(x, "__cuda_array_interface__")  # a device array stays where it is
            model(x if isinstance(x, Tensor) else Tensor(x, device=device if on_host else None))
            n += 1
    if n == 0:
        raise ValueError("calibrate() got no batches: pass an iterable of input batches")
    return model


def convert(model, per_channel=False):
    """Swap every :class:`ObservedLinear` for a :class:`QuantizedLinear`, in place."""
    return _swap(model, ObservedLinear,
                 lambda obs: QuantizedLinear.from_float(obs.linear, obs.observer, per_channel))


def quantize_model(model, batches, observer=MinMaxObserver, per_channel=False):
    """Post-training quantization in one call: prepare, calibrate on ``batches``, convert."""
    return convert(calibrate(prepare(model, observer), batches), per_channel)


class FakeQuantLinear(nn.Module):
    """Quantization-aware training: a Linear whose weight and input pass through ``fake_quantize``.

    The forward sees exactly the rounding the int8 model will do; the backward is the
    straight-through estimator, so training learns weights that survive it. The input's range
    comes from a moving-average observer updated in training mode; the weight's from its
    current min/max (symmetric int8). ``to_quantized()`` then gives the QuantizedLinear.
    """

    def __init__(self, linear, per_channel=False, averaging_constant=0.01):
        super().__init__()
        self.linear, self.per_channel = linear, per_channel
        self.observer = MovingAverageMinMaxObserver(averaging_constant)

    def _weight_qparams(self):
        if self.per_channel:
            obs = PerChannelMinMaxObserver(ch_axis=0, dtype="qint8", qscheme="per_channel_symmetric")
        else:
            obs = MinMaxObserver(dtype="qint8", qscheme="per_tensor_symmetric")
        obs(self.linear.weight)
        return obs.calculate_qparams()

    def forward(self, x):
        if self.training:
            self.observer(x)
        x_scale, x_zp = self.observer.calculate_qparams()
        # The observers' qparams are valid by construction: not copied to the host to be checked.
        xq = fake_quantize(x, x_scale, x_zp, self.observer.quant_min, self.observer.quant_max, check=False)
        w_scale, w_zp = self._weight_qparams()
        wq = fake_quantize(self.linear.weight, w_scale, w_zp, -128, 127, axis=0 if self.per_channel else None,
                           check=False)
        return F.linear(xq, wq, self.linear.bias)

    def to_quantized(self):
        return QuantizedLinear.from_float(self.linear, self.observer, self.per_channel)


def prepare_qat(model, per_channel=False):
    """Swap every Linear for a :class:`FakeQuantLinear` (in place) for quantization-aware training."""
    return _swap(model, nn.Linear, lambda lin: FakeQuantLinear(lin, per_channel))


def convert_qat(model):
    """Swap every :class:`FakeQuantLinear` for its :class:`QuantizedLinear` (in place)."""
    return _swap(model, FakeQuantLinear, lambda m: m.to_quantized())
