"""The functional face of the vision ops (re-exported by ``tinymem.functional``).

PyTorch's names and arguments: ``conv2d(input, weight, bias=None, stride=1, padding=0)``,
``max_pool2d``, ``avg_pool2d``, ``interpolate(x, scale_factor=2, mode="nearest")``,
``batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)``. Memory
costs are stated on the Functions in ``tinymem/ops/conv.py``, ``pool.py`` and ``batchnorm.py``.
"""
from ..ops import batchnorm as BN
from ..ops import conv as C
from ..ops import pool as P


def conv2d(input, weight, bias=None, stride=1, padding=0):
    """2-D convolution (cross-correlation) of (B, C, H, W) with weight (O, C, kh, kw), by im2col."""
    args = (input, weight) if bias is None else (input, weight, bias)
    return C.Conv2d.apply(*args, stride=C.pair(stride, "stride"), padding=C.pair(padding, "padding"))


def max_pool2d(input, kernel_size, stride=None, padding=0):
    """Window maximum; ``stride`` defaults to ``kernel_size`` as in PyTorch."""
    kernel = C.pair(kernel_size, "kernel_size")
    stride = kernel if stride is None else C.pair(stride, "stride")
    return P.MaxPool2d.apply(input, kernel=kernel, stride=stride, padding=C.pair(padding, "padding"))


def avg_pool2d(input, kernel_size, stride=None, padding=0):
    """Window mean (zero padding counted); ``stride`` defaults to ``kernel_size``."""
    kernel = C.pair(kernel_size, "kernel_size")
    stride = kernel if stride is None else C.pair(stride, "stride")
    return P.AvgPool2d.apply(input, kernel=kernel, stride=stride, padding=C.pair(padding, "padding"))


def interpolate(input, scale_factor=2, mode="nearest"):
    """Upsample (B, C, H, W) by an integer factor; only ``mode="nearest"`` is implemented."""
    if mode != "nearest":
        raise ValueError(f"interpolate: tinymem implements mode='nearest' only, got {mode!r}")
    if int(scale_factor) != scale_factor or scale_factor < 1:
        raise ValueError(f"interpolate: scale_factor must be a positive integer, got {scale_factor!r}")
    return P.UpsampleNearest2d.apply(input, scale=int(scale_factor))


def batch_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
               training=False, momentum=0.1, eps=1e-5):
    """Batch normalisation of (B, C, H, W); updates the running arrays in place when training
    (except during checkpoint recomputation, see ``tinymem/ops/batchnorm.py``)."""
    args = [input] + [t for t in (weight, bias) if t is not None]
    if weight is None and bias is not None:
        raise ValueError("batch_norm: a bias without a weight is not supported; pass both or neither")
    return BN.BatchNorm2d.apply(*args, running_mean=running_mean, running_var=running_var,
                                training=training, momentum=momentum, eps=eps)
