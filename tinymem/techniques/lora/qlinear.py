"""NF4Linear: QLoRA's frozen base layer, its weight stored in NF4 (double-quantized scales).

Contract:
- The weight is stored as NF4 codes and block scales (``parameter`` bucket, about 4.127 bits per
  weight with double quantization, 4.5 without); the bias stays a frozen float32 Parameter.
- Forward dequantizes the whole weight just before the matmul and drops it right after: at any
  moment only the layer being computed has a float32 weight, 4·in·out bytes of ``workspace``
  (plus the gather's index, at most 128 KiB on NumPy, freed first). Backward dequantizes it again for
  the input's gradient instead of keeping it: time for memory, as bitsandbytes does.
- No gradient reaches the weight or bias (they are frozen); nothing is saved for backward,
  not even the input, since only the input's gradient is needed.

Memory per call: 4·in·out bytes of workspace and the index (4·in·out + 128 KiB at most),
none kept; with a float16 input, also the float32 product (4 bytes per output value) until it is
cast back. Time: one dequantization (a gather and a multiply over in·out values) per forward and
one per backward.
"""
import math

import numpy as np

from ... import backend, memory
from ...autograd import Function, Tensor
from ...checks import positive_int
from ...nn import Module, Parameter
from .adapter import apply_lora
from .double_quant import dequantize_absmax, quantize_absmax
from .nf4 import BLOCK, dequantize_nf4, quantize_nf4

_STORED = ("packed", "absmax", "absmax_codes", "absmax_scale", "absmax_mean")


class NF4Matmul(Function):
    """``y = x W^T + b`` with W dequantized from ``layer`` for the product only. The product is
    computed in float32 and returned in the input's dtype, as bitsandbytes' ``Linear4bit`` does:
    a float16 model stays float16 after the layer (its float32 result is a temporary)."""

    def forward(ctx, x, layer=None):
        ctx.layer, ctx.dtype = layer, x.dtype
        w = layer.dequantize()
        y = x @ w.T
        del w
        if layer.bias is not None:
            y += layer.bias.data
        return y if y.dtype == x.dtype else y.astype(x.dtype)

    def backward(ctx, g):
        gx = g @ ctx.layer.dequantize()
        return gx if gx.dtype == ctx.dtype else gx.astype(ctx.dtype)


class NF4Linear(Module):
    """A frozen Linear whose weight is NF4; build one with :meth:`from_linear`."""

    def __init__(self, weight, bias=None, double_quant=True):
        super().__init__()
        if getattr(weight, "ndim", None) != 2 or weight.dtype.kind != "f":
            raise TypeError(f"NF4Linear stores a 2-d float weight (out_features, in_features), got "
                            f"{getattr(weight, 'dtype', type(weight).__name__)} of shape {getattr(weight, 'shape', None)}")
        if weight.size == 0:
            raise ValueError(f"NF4Linear needs a weight with at least one value, got shape {tuple(weight.shape)}")
        bias = bias.data if isinstance(bias, Tensor) else bias
        if bias is not None and (getattr(bias, "shape", None) != weight.shape[:1] or bias.dtype.kind != "f"):
            raise ValueError(f"NF4Linear: the bias must be a float array of shape ({weight.shape[0]},), one value "
                             f"per output, got {getattr(bias, 'dtype', type(bias).__name__)} of shape "
                             f"{getattr(bias, 'shape', None)}: a Linear's bias is not broadcast")
        check_double_quant("NF4Linear", double_quant)
        self.out_features, self.in_features = weight.shape
        self.double_quant = bool(double_quant)
        packed, absmax = quantize_nf4(weight)
        stored = {"packed": packed}
        if double_quant:
            stored["absmax_codes"], stored["absmax_scale"], stored["absmax_mean"] = quantize_absmax(absmax)
        else:
            stored["absmax"] = absmax
        for name in _STORED:
            value = stored.get(name)
            setattr(self, name, None if value is None else memory.register(value, "parameter"))
        self.bias = None if bias is None else Parameter(bias.copy(), requires_grad=False)

    @classmethod
    def from_linear(cls, linear, double_quant=True):
        """Quantize ``linear``'s weight; the float weight is freed once nothing else holds it."""
        bias = None if linear.bias is None else linear.bias.data
        return cls(linear.weight.data, bias, double_quant)

    def stored(self):
        """The arrays that hold the weight, by name."""
        return {name: getattr(self, name) for name in _STORED if getattr(self, name) is not None}

    def stored_weight(self):
        return self.packed

    def weight_nbytes(self):
        """Bytes of the stored weight (codes and scales, bias excluded)."""
        return sum(a.nbytes for a in self.stored().values())

    def bits_per_weight(self):
        """Stored bits per weight, from the arrays' own ``nbytes``."""
        return 8 * self.weight_nbytes() / (self.in_features * self.out_features)

    def scales(self):
        """The float32 block scales (reconstructed from 8 bits with double quantization)."""
        if not self.double_quant:
            return self.absmax
        scales = dequantize_absmax(self.absmax_codes, self.absmax_scale, self.absmax_mean)
        return memory.register(scales, "workspace", label="nf4 scales")

    def dequantize(self):
        """The float32 weight (out, in), counted as ``workspace`` ("nf4 weight") until dropped."""
        size = self.in_features * self.out_features

        def count(array):
            label = "nf4 weight" if array.dtype == np.float32 else "nf4 index"
            return memory.register(array, "workspace", label=label)

        flat = dequantize_nf4(self.packed, self.scales(), size, BLOCK, count)
        return flat.reshape(self.out_features, self.in_features)

    def forward(self, x):
        return NF4Matmul.apply(x, layer=self)

    def _extra_state(self):
        return self.stored()

    def _check_extra_state(self, key, name, value):
        # The arrays are copied into in place: a float or out-of-range code would be cast to
        # uint8 silently (1000 -> 232), a NaN scale would turn whole blocks into NaN.
        value = np.asarray(value)
        if name in ("packed", "absmax_codes"):
            if value.dtype.kind not in "iu" or (value.size and not 0 <= int(value.min()) <= int(value.max()) <= 255):
                raise ValueError(f"load_state_dict: {key} must hold uint8 codes (integers 0..255), got "
                                 f"{value.dtype} values: was the state saved from another layer?")
        elif value.dtype.kind != "f" or not np.isfinite(value).all():
            raise ValueError(f"load_state_dict: {key} must hold finite float scales, got {value.dtype} values"
                             + (" with inf or NaN" if value.dtype.kind == "f" else ""))

    def _load_extra_state(self, name, value):
        getattr(self, name)[...] = backend.to_device(np.asarray(value), backend.device_of(self.packed))

    def _move_extra_state(self, device):
        """The codes and scales go where ``Module.to`` sends the parameters (the bias), as
        bitsandbytes moves its quantization state with ``Params4bit``. They stay NF4 whatever the
        dtype: a cast would mean quantizing again."""
        for name, value in self.stored().items():
            setattr(self, name, memory.register(backend.to_device(value, device), "parameter"))

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"double_quant={self.double_quant}, bits_per_weight={self.bits_per_weight():.3f}")


def check_double_quant(who, double_quant):
    if not isinstance(double_quant, (bool, np.bool_)):  # 'no' is truthy: it would quantize the scales
        raise TypeError(f"{who}: double_quant must be True or False, got {double_quant!r}")


def expected_bits_per_weight(n, double_quant=True):
    """The formula the stored arrays are held to: codes, scales and (double quantization) the
    8-bit scales, their float32 scales and the one float32 mean, for ``n`` weights."""
    positive_int("expected_bits_per_weight: n (the number of weights)", n)
    check_double_quant("expected_bits_per_weight", double_quant)
    blocks = math.ceil(n / BLOCK)
    if not double_quant:
        return 8 * (math.ceil(n / 2) + 4 * blocks) / n
    return 8 * (math.ceil(n / 2) + blocks + 4 * math.ceil(blocks / 256) + 4) / n


def apply_qlora(model, r, alpha=None, targets=("*",), dropout=0.0, double_quant=True):
    """:func:`~.adapter.apply_lora` with each chosen Linear's weight stored in NF4 first (QLoRA):
    the float32 weights are freed, 4 bytes per weight becoming about 0.52."""
    return apply_lora(model, r, alpha, targets, dropout,
                      wrap=lambda linear: NF4Linear.from_linear(linear, double_quant))
