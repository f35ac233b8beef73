"""A CNN as a chain of inference layers, each with its window geometry: what edge execution needs.

On a microcontroller a CNN runs one layer at a time, batch 1, BatchNorm folded into the
convolution and the ReLU fused into it (MCUNet, TFLite Micro). :func:`chain` turns a tinymem
model (Sequential, U-Net blocks) into that list of layers:

- :class:`ConvLayer`: a convolution with BatchNorm folded in, W' = W·g/sqrt(v + eps),
  b' = (b - m)·g/sqrt(v + eps) + beta, and an optional ReLU;
- :class:`PoolLayer`: max pooling.

Each layer states its window (``kernel``, ``stride``, ``padding``) so a patch of its output can
be traced back to the input rows and columns it reads (``patch.py``), and runs on an input
that was padded by the caller (``forward(x, padding=0)``), so a tile at the image border can
carry its own zero padding. Memory: a ConvLayer keeps float32 W' and b' (4·(O·C·k² + O)
bytes, ``parameter`` bucket); on a device they would live in flash, not SRAM.
"""
import numpy as np

from .. import backend, memory, nn
from .. import functional as F
from ..autograd import Tensor
from ..models.unet import Down


class ConvLayer:
    """A direct convolution (+ folded BatchNorm) (+ ReLU) with ``kernel``, ``stride``, ``padding``.

    Direct, not im2col + GEMM: the output starts as the bias and gets one product added per
    (input channel, kernel row, kernel column), in that order, as a microcontroller kernel
    loops. Every output value is then the same sum in the same order however large the
    computed region is, which is what makes patch-based outputs bit-identical to whole-layer
    ones (a BLAS GEMM picks its summation order by matrix size). Memory per call: the output,
    one output-sized product (NumPy has no fused multiply-add), and a zero-padded copy of the
    input when ``padding`` > 0. Inference only: no gradient is recorded.
    """

    def __init__(self, weight, bias, stride, padding, relu=False, device=None):
        if weight.ndim != 4 or weight.shape[2] != weight.shape[3]:
            # The loops and the window tracing use one kernel size for rows and columns.
            raise ValueError(f"ConvLayer needs a square kernel, weight of shape (O, C, k, k); got {weight.shape}")
        # On ``device`` (the default device when None): the layer multiplies them with its input.
        self.weight = memory.register(backend.to_device(np.ascontiguousarray(weight, np.float32), device), "parameter")
        self.bias = memory.register(backend.to_device(np.asarray(bias, np.float32), device), "parameter")
        self.kernel, self.stride, self.padding, self.relu = weight.shape[2], stride, padding, relu
        self.out_channels = weight.shape[0]

    def __call__(self, x, padding=None):
        pad = self.padding if padding is None else padding
        data = x.data if isinstance(x, Tensor) else x
        xp = backend.array_module(data)
        if data.ndim != 4 or data.shape[1] != self.weight.shape[1]:
            # Extra channels would be skipped silently by the loop over the weight's channels.
            raise ValueError(f"{self!r}: input of shape {data.shape}; expected (B, {self.weight.shape[1]}, H, W)")
        if pad:
            data = memory.register(xp.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad))), "workspace",
                                   label="padded input")
        o, c, k, _ = self.weight.shape
        s = self.stride
        oh, ow = (data.shape[2] - k) // s + 1, (data.shape[3] - k) // s + 1
        if oh < 1 or ow < 1:
            raise ValueError(f"{self!r}: input {data.shape[2:]} is smaller than the {k}x{k} kernel")
        y = memory.register(xp.empty((data.shape[0], o, oh, ow), np.float32), "workspace", label="conv output")
        y[...] = self.bias.reshape(1, o, 1, 1)
        product = memory.register(xp.empty_like(y), "workspace", label="conv product")
        for ci in range(c):
            for i in range(k):
                for j in range(k):
                    window = data[:, ci:ci + 1, i:i + s * (oh - 1) + 1:s, j:j + s * (ow - 1) + 1:s]
                    xp.multiply(self.weight[:, ci, i, j].reshape(1, o, 1, 1), window, out=product)
                    y += product
        del product
        if self.relu:
            xp.maximum(y, 0, out=y)
        return Tensor(y)

    def macs(self, out_h, out_w):
        """Multiply-accumulates to compute an out_h x out_w patch of the output."""
        o, c, k, _ = self.weight.shape
        return o * c * k * k * out_h * out_w

    def __repr__(self):
        o, c, k, _ = self.weight.shape
        return f"Conv{k}x{k}({c}->{o}, s{self.stride}{', relu' if self.relu else ''})"


class PoolLayer:
    """max_pool2d with ``kernel`` and ``stride`` (no padding)."""

    def __init__(self, kernel, stride=None):
        self.kernel, self.stride, self.padding, self.relu = kernel, stride or kernel, 0, False

    def __call__(self, x, padding=None):
        return F.max_pool2d(x, self.kernel, self.stride)

    def macs(self, out_h, out_w):
        return 0

    def __repr__(self):
        return f"MaxPool{self.kernel}"


def _single(value, what):
    a, b = value if isinstance(value, tuple) else (value, value)
    if a != b:
        raise ValueError(f"edge layers need square {what}s, got {value}")
    return a


def _fold(conv, bn=None):
    w = backend.to_numpy(conv.weight.data).astype(np.float64)
    b = backend.to_numpy(conv.bias.data).astype(np.float64) if conv.bias is not None else np.zeros(len(w))
    if bn is not None:
        gamma = backend.to_numpy(bn.weight.data) if bn.weight is not None else 1.0
        beta = backend.to_numpy(bn.bias.data) if bn.bias is not None else 0.0
        g = gamma / np.sqrt(backend.to_numpy(bn.running_var).astype(np.float64) + bn.eps)
        w, b = w * g[:, None, None, None], (b - backend.to_numpy(bn.running_mean)) * g + beta
    return w, b


def chain(model):
    """The layers of ``model`` in execution order, BatchNorm folded and ReLU fused.

    Accepts nn.Sequential (nested too), Conv2d, BatchNorm2d, ReLU, MaxPool2d and the U-Net's
    ``Down`` blocks; anything else raises with the type it could not place.
    """
    flat = []

    def walk(m):
        if isinstance(m, (list, tuple, nn.Sequential)):
            for child in m:
                walk(child)
        elif isinstance(m, Down):
            flat.append(nn.MaxPool2d(2))
            walk(m.conv)
        elif isinstance(m, (nn.Conv2d, nn.BatchNorm2d, nn.ReLU)) or type(m) is nn.MaxPool2d:
            # MaxPool2d by exact type: AvgPool2d subclasses it, and would run here as a max.
            flat.append(m)
        else:
            raise TypeError(f"chain() cannot place a {type(m).__name__}: edge chains hold Conv2d, "
                            "BatchNorm2d, ReLU, MaxPool2d and U-Net Down blocks")

    walk(model)
    layers, i = [], 0
    while i < len(flat):
        m = flat[i]
        if isinstance(m, nn.Conv2d):
            bn = flat[i + 1] if i + 1 < len(flat) and isinstance(flat[i + 1], nn.BatchNorm2d) else None
            j = i + 1 + (bn is not None)
            relu = j < len(flat) and isinstance(flat[j], nn.ReLU)
            _single(m.kernel_size, "kernel")
            w, b = _fold(m, bn)
            layers.append(ConvLayer(w, b, _single(m.stride, "stride"), _single(m.padding, "padding"), relu,
                                    device=backend.device_of(m.weight.data)))
            i = j + relu
        elif isinstance(m, nn.MaxPool2d):
            if m.padding:
                raise ValueError("edge chains take max pooling without padding")
            layers.append(PoolLayer(_single(m.kernel_size, "kernel"), m.stride and _single(m.stride, "stride")))
            i += 1
        else:
            raise TypeError(f"a {type(m).__name__} must follow a Conv2d to be folded into it")
    return layers


def as_chain(model):
    """``model`` if it already is a chain (a list of edge layers), else ``chain(model)``."""
    return model if isinstance(model, list) and all(isinstance(m, (ConvLayer, PoolLayer)) for m in model) \
        else chain(model)


def unet_encoder(unet):
    """The encoder of a tinymem U-Net as a chain: its first block and every ``Down`` block.

    Run alone, it is a feature extractor: the skip connections a full U-Net keeps for its
    decoder are not held here.
    """
    return chain([unet.inc, *unet.downs])


def run_chain(layers, x):
    """Run ``layers`` one after the other on ``x`` (a Tensor), whole layers at a time."""
    for layer in layers:
        x = layer(x)
    return x
