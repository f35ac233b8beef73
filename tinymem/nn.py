"""Modules and layers, with PyTorch's names, defaults and initialisation.

A :class:`Module` finds its :class:`Parameter` s and sub-modules through attribute assignment, as
in PyTorch. Parameters live in the ledger's ``parameter`` bucket: a Linear(in, out) in float32
holds 4·(in·out + out) bytes there.
"""
import math
from collections import OrderedDict

import numpy as np

from . import backend, random
from . import functional as F
from .autograd import Tensor


class Parameter(Tensor):
    """A Tensor that is a weight: it requires a gradient and counts in the ``parameter`` bucket."""

    _bucket = "parameter"

    def __init__(self, data, requires_grad=True):
        super().__init__(data.data if isinstance(data, Tensor) else data, requires_grad=requires_grad)

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base class: override ``forward``; call the module like a function."""

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"call super().__init__() in {type(self).__name__}.__init__ first")
        # Re-assigning keeps the slot (dict assignment keeps order), as PyTorch does: a
        # Sequential whose layer is swapped must still run its layers in order.
        if not isinstance(value, Parameter):
            self._parameters.pop(name, None)
        if not isinstance(value, Module):
            self._modules.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must define forward")

    # -- traversal -----------------------------------------------------------------------
    def named_modules(self, prefix=""):
        yield prefix, self
        for name, module in self._modules.items():
            yield from module.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return [m for _, m in self.named_modules()]

    def children(self):
        return list(self._modules.values())

    def named_parameters(self, prefix=""):
        seen = set()
        for mod_name, module in self.named_modules(prefix):
            for name, p in module._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mod_name}.{name}" if mod_name else name), p

    def parameters(self):
        return [p for _, p in self.named_parameters()]

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.data = p.grad.data * 0

    def train(self, mode=True):
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def to(self, device=None, dtype=None):
        """Move (and/or cast) every parameter in place, keeping the Parameter objects."""
        device = backend.check_device(device) if device is not None else None
        dtype = backend.resolve_dtype(dtype)
        for p in self.parameters():
            data = backend.to_device(p.data, device) if device is not None else p.data
            if dtype is not None and data.dtype.kind == "f":
                data = data.astype(dtype)
            p.data = data
            if p.grad is not None:
                p.grad = None
        return self

    def num_parameters(self):
        return sum(p.size for p in self.parameters())

    # -- state -------------------------------------------------------------------------------
    def state_dict(self):
        """Parameter arrays (copies, on the CPU) by dotted name, plus any extra buffers."""
        state = OrderedDict((name, p.numpy().copy()) for name, p in self.named_parameters())
        for mod_name, module in self.named_modules():
            for name, value in module._extra_state().items():
                state[f"{mod_name}.{name}" if mod_name else name] = np.array(backend.to_numpy(value))
        return state

    def load_state_dict(self, state):
        """Copy arrays into the parameters; names and shapes must match exactly."""
        own = dict(self.named_parameters())
        buffers = {}
        for mod_name, module in self.named_modules():
            for name in module._extra_state():
                buffers[f"{mod_name}.{name}" if mod_name else name] = (module, name)
        missing = sorted((set(own) | set(buffers)) - set(state))
        unexpected = sorted(set(state) - set(own) - set(buffers))
        if missing or unexpected:
            raise KeyError(f"load_state_dict: missing keys {missing}, unexpected keys {unexpected}")
        for name, p in own.items():
            value = np.asarray(state[name])
            if value.shape != p.shape:
                raise ValueError(f"load_state_dict: {name} has shape {value.shape}, expected {p.shape}")
            p.data = backend.to_device(value.astype(p.dtype), p.device).copy()
        for key, (module, name) in buffers.items():
            module._load_extra_state(name, state[key])

    def _extra_state(self):
        """Non-parameter state to save (running statistics); empty by default."""
        return {}

    def _load_extra_state(self, name, value):
        setattr(self, name, value)

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            lines.append(f"  ({name}): " + repr(m).replace("\n", "\n  "))
        return lines[0] + (")" if len(lines) == 1 else "\n" + "\n".join(lines[1:]) + "\n)")

    def extra_repr(self):
        return ""


class Sequential(Module):
    """Run modules in order. Indexable and iterable, like PyTorch's."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], (list, tuple)):
            modules = modules[0]
        for i, m in enumerate(modules):
            setattr(self, str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __getitem__(self, i):
        mods = list(self._modules.values())
        return Sequential(*mods[i]) if isinstance(i, slice) else mods[i]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())


def _uniform(shape, bound, device):
    return Parameter(random.uniform(-bound, bound, shape, device))


class Linear(Module):
    """y = x W^T + b. Init as PyTorch: W, b ~ U(-1/sqrt(in), 1/sqrt(in)).

    Memory: parameters 4·(in·out + out) bytes (float32); saves its input for backward.
    """

    def __init__(self, in_features, out_features, bias=True, device=None):
        super().__init__()
        device = backend.check_device(device)
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        self.weight = _uniform((out_features, in_features), bound, device)
        self.bias = _uniform((out_features,), bound, device) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


class GELU(Module):
    """GELU, tanh approximation (tinymem has no erf-based GELU)."""

    def __init__(self, approximate="tanh"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class Identity(Module):
    def forward(self, x):
        return x


class Dropout(Module):
    """Dropout with the seeded RNG; identity in eval mode. Saves a 1-byte mask per element."""

    def __init__(self, p=0.5):
        super().__init__()
        if not 0 <= p < 1:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"


class LayerNorm(Module):
    """Normalise over the last dims; weight 1, bias 0 at init. Memory: 8·D parameter bytes."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, device=None):
        super().__init__()
        device = backend.check_device(device)
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.normalized_shape, self.eps = shape, eps
        xp = backend.array_module(device)
        self.weight = Parameter(xp.ones(shape, np.float32)) if elementwise_affine else None
        self.bias = Parameter(xp.zeros(shape, np.float32)) if elementwise_affine else None

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)


class Embedding(Module):
    """A table of ``num_embeddings`` rows of size ``embedding_dim``, init N(0, 1) as PyTorch."""

    def __init__(self, num_embeddings, embedding_dim, device=None):
        super().__init__()
        device = backend.check_device(device)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.weight = Parameter(random.randn((num_embeddings, embedding_dim), device))

    def forward(self, indices):
        return F.embedding(indices, self.weight)

from .nn_seq import EmbeddingBag, MultiheadAttention  # noqa: E402,F401
from .layers.conv import AvgPool2d, BatchNorm2d, Conv2d, MaxPool2d, Upsample  # noqa: E402,F401
