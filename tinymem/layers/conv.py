"""Vision layers: Conv2d, MaxPool2d, AvgPool2d, Upsample, BatchNorm2d (re-exported by ``nn``).

Initialisation and defaults follow PyTorch: Conv2d's weight and bias ~ U(-1/sqrt(fan_in),
1/sqrt(fan_in)) with fan_in = C·kh·kw (what ``kaiming_uniform_(a=sqrt(5))`` works out to);
BatchNorm2d starts at weight 1, bias 0, running mean 0 and running variance 1, momentum 0.1.
"""
import math

import numpy as np

from .. import backend, memory
from ..autograd import is_recomputing
from ..nn import Module, Parameter, _uniform
from ..ops.conv import pair
from . import conv_functional as F


class Conv2d(Module):
    """2-D convolution. Memory: parameters 4·(O·C·kh·kw + O) bytes in float32; saves its input
    (B·C·H·W elements) for backward; a bounded im2col workspace while it runs."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True,
                 device=None):
        super().__init__()
        device = backend.check_device(device)
        kh, kw = pair(kernel_size, "kernel_size")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size, self.stride, self.padding = (kh, kw), pair(stride, "stride"), pair(padding, "padding")
        bound = 1.0 / math.sqrt(in_channels * kh * kw)
        self.weight = _uniform((out_channels, in_channels, kh, kw), bound, device)
        self.bias = _uniform((out_channels,), bound, device) if bias else None

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, bias={self.bias is not None}")


class MaxPool2d(Module):
    """Window maximum; saves one uint8 per output element."""

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__()
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
        self.scale_factor, self.mode = scale_factor, mode

    def forward(self, x):
        return F.interpolate(x, self.scale_factor, self.mode)

    def extra_repr(self):
        return f"scale_factor={self.scale_factor}, mode={self.mode!r}"


class BatchNorm2d(Module):
    """Batch normalisation per channel with running statistics (PyTorch's defaults).

    The running mean and variance are buffers, not parameters: no gradient, saved by
    ``state_dict()``, counted in the ledger's ``parameter`` bucket (2·C floats) because they are
    model state that lives as long as the model. Under checkpoint recomputation they are not
    updated a second time (see ``tinymem/ops/batchnorm.py``).
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None):
        super().__init__()
        device = backend.check_device(device)
        xp = backend.array_module(device)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(xp.ones(num_features, np.float32)) if affine else None
        self.bias = Parameter(xp.zeros(num_features, np.float32)) if affine else None
        self.track_running_stats, self._device = track_running_stats, device
        if track_running_stats:
            self._load_extra_state("running_mean", xp.zeros(num_features, np.float32))
            self._load_extra_state("running_var", xp.ones(num_features, np.float32))
        else:
            self.running_mean = self.running_var = None
        self.num_batches_tracked = 0

    def forward(self, x):
        training = self.training or not self.track_running_stats
        if self.training and self.track_running_stats and not is_recomputing():
            self.num_batches_tracked += 1
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training, self.momentum, self.eps)

    def _extra_state(self):
        if not self.track_running_stats:
            return {}
        return {"running_mean": self.running_mean, "running_var": self.running_var,
                "num_batches_tracked": np.array(self.num_batches_tracked, np.int64)}

    def _load_extra_state(self, name, value):
        if name == "num_batches_tracked":
            self.num_batches_tracked = int(value)
            return
        array = backend.to_device(value, self._device).astype(np.float32)  # astype copies
        memory.register(array, "parameter")
        setattr(self, name, array)

    def to(self, device=None, dtype=None):
        """Move the parameters (and cast them); the running statistics move but stay float32."""
        super().to(device, dtype)
        if device is not None:
            self._device = backend.check_device(device)
            if self.track_running_stats:
                for name in ("running_mean", "running_var"):
                    self._load_extra_state(name, getattr(self, name))
        return self

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"

