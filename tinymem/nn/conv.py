"""Vision layers: Conv2d, MaxPool2d, AvgPool2d and Upsample.

Initialisation and defaults follow PyTorch: Conv2d's weight and bias ~ U(-1/sqrt(fan_in),
1/sqrt(fan_in)) with fan_in = C·kh·kw (what ``kaiming_uniform_(a=sqrt(5))`` works out to).
"""
import math

from .. import backend
from .. import functional as F
from ..checks import positive_int
from ..ops.conv import check_window, pair
from .init import uniform
from .module import Module


class Conv2d(Module):
    """2-D convolution. Memory: parameters 4·(O·C·kh·kw + O) bytes in float32; saves its input
    (B·C·H·W elements) for backward; a bounded im2col workspace while it runs."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True,
                 device=None):
        super().__init__()
        device = backend.check_device(device)
        kh, kw = pair(kernel_size, "kernel_size")
        self.in_channels = positive_int("Conv2d: in_channels", in_channels)
        self.out_channels = positive_int("Conv2d: out_channels", out_channels)
        self.kernel_size, self.stride, self.padding = (kh, kw), pair(stride, "stride"), pair(padding, "padding")
        check_window("Conv2d", self.kernel_size, self.stride, self.padding)
        bound = 1.0 / math.sqrt(in_channels * kh * kw)
        self.weight = uniform((out_channels, in_channels, kh, kw), bound, device)
        self.bias = uniform((out_channels,), bound, device) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}")


class MaxPool2d(Module):
    """Window maximum; saves one uint8 per output element."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
        kernel = pair(kernel_size, "kernel_size")
        check_window(type(self).__name__, kernel, kernel if stride is None else pair(stride, "stride"),
                     pair(padding, "padding"))
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride or self.kernel_size}"


class AvgPool2d(MaxPool2d):
    """Window mean; saves nothing."""

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding)


class Upsample(Module):
    """Nearest-neighbour upsampling by an integer ``scale_factor``; saves nothing."""

    def __init__(self, scale_factor=2, mode="nearest"):
        super().__init__()
        F.check_interpolate(scale_factor, mode, "Upsample")
        self.scale_factor, self.mode = scale_factor, mode

    def forward(self, x):
        return F.interpolate(x, self.scale_factor, self.mode)

    def extra_repr(self):
        return f"scale_factor={self.scale_factor}, mode={self.mode!r}"
