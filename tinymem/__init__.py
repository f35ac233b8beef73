"""tinymem: a from-scratch NumPy/CuPy deep-learning framework that teaches memory-efficient training.

    import tinymem as tm
    x = tm.tensor([[1.0, 2.0]], requires_grad=True)
    with tm.memory.track() as t:
        (x * x).sum().backward()
    print(t.peak_by_bucket())
"""
from . import autograd, backend, data, functional, memory, models, nn, optim, random
from .autograd import (Function, Tensor, backward, enable_grad, is_grad_enabled, no_grad,
                       saved_tensors_hooks, set_grad_enabled, tensor)
from .backend import (DeviceError, cuda_available, default_device_as, get_default_device,
                      set_default_device)
from .memory import OutOfMemoryError
from .random import get_rng_state, manual_seed, set_rng_state
from .serialization import CheckpointError, load, save
from .version import __version__

# Tensor's operators are differentiable ops, which sit above the engine: the table that declares
# them (functional.TENSOR_METHODS) is attached here, once.
functional.attach_tensor_methods(Tensor)

float16, float32, float64 = "float16", "float32", "float64"
int8, uint8, int32, int64 = "int8", "uint8", "int32", "int64"


def _factory_dtype(dtype, floating=False):
    """``dtype`` resolved; None is float32, as PyTorch's default (NumPy's would be float64)."""
    resolved = backend.resolve_dtype("float32" if dtype is None else dtype)
    if floating and resolved.kind != "f":
        raise TypeError(f"random floats cannot be of dtype {resolved}; ask for a floating dtype "
                        "(float32, float64, float16)")
    return resolved


def zeros(*shape, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    xp = backend.array_module(backend.check_device(device))
    return Tensor(xp.zeros(shape, _factory_dtype(dtype)), requires_grad=requires_grad)


def ones(*shape, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    xp = backend.array_module(backend.check_device(device))
    return Tensor(xp.ones(shape, _factory_dtype(dtype)), requires_grad=requires_grad)


def randn(*shape, dtype="float32", device=None, requires_grad=False):
    """Standard normal values from tinymem's seeded generator."""
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device = backend.check_device(device)
    return Tensor(random.randn(shape, device, _factory_dtype(dtype, floating=True)), requires_grad=requires_grad)


def rand(*shape, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device = backend.check_device(device)
    return Tensor(random.rand(shape, device, _factory_dtype(dtype, floating=True)), requires_grad=requires_grad)


cat = functional.concatenate
stack = functional.stack
where = functional.where
matmul = functional.matmul
