"""Linear: the fully connected layer, ``y = x W^T + b``."""
import math

from .. import backend
from .. import functional as F
from ..checks import positive_int
from .init import uniform
from .module import Module


class Linear(Module):
    """y = x W^T + b. Init as PyTorch: W, b ~ U(-1/sqrt(in), 1/sqrt(in)).

    Memory: parameters 4·(in·out + out) bytes (float32); saves its input for backward.
    """

    def __init__(self, in_features, out_features, bias=True, device=None):
        super().__init__()
        device = backend.check_device(device)
        self.in_features = positive_int("Linear: in_features", in_features)
        self.out_features = positive_int("Linear: out_features", out_features)
        bound = 1.0 / math.sqrt(in_features)
        self.weight = uniform((out_features, in_features), bound, device)
        self.bias = uniform((out_features,), bound, device) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"
