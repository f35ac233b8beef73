"""Normalisation layers: LayerNorm (over the last dims) and BatchNorm2d (per channel)."""
import numpy as np

from .. import backend, memory
from .. import functional as F
from ..autograd import is_recomputing
from ..checks import is_int, positive_int, real_number
from .module import Module, Parameter


def _positive_eps(layer, eps):
    if not real_number(f"{layer}: eps", eps) > 0:
        raise ValueError(f"{layer}: eps must be > 0 (it keeps 1/std finite), got {eps!r}")
    return eps


class LayerNorm(Module):
    """Normalise over the last dims; weight 1, bias 0 at init. Memory: 8·D parameter bytes."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, device=None):
        super().__init__()
        device = backend.check_device(device)
        shape = (normalized_shape,) if is_int(normalized_shape) else tuple(normalized_shape)
        self.normalized_shape = tuple(positive_int("LayerNorm: each size of normalized_shape", n) for n in shape)
        self.eps = _positive_eps("LayerNorm", eps)
        xp = backend.array_module(device)
        self.weight = Parameter(xp.ones(shape, np.float32)) if elementwise_affine else None
        self.bias = Parameter(xp.zeros(shape, np.float32)) if elementwise_affine else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


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
        self.num_features = positive_int("BatchNorm2d: num_features", num_features)
        self.eps = _positive_eps("BatchNorm2d", eps)
        if not 0 <= real_number("BatchNorm2d: momentum", momentum) <= 1:  # 2 makes the running mean diverge
            raise ValueError(f"BatchNorm2d: momentum must be in [0, 1], got {momentum!r}")
        self.momentum = momentum
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

    def _move_extra_state(self, device):
        """The running statistics follow the parameters' device (and stay float32 whatever the dtype)."""
        self._device = backend.check_device(device)
        if self.track_running_stats:
            for name in ("running_mean", "running_var"):
                self._load_extra_state(name, getattr(self, name))

    def extra_repr(self):
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"
