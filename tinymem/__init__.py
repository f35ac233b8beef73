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
    device = backend.check_device(device)
    return Tensor(backend.array_module(device).zeros(shape, _factory_dtype(dtype)), requires_grad=requires_grad,
                  device=device)


def ones(*shape, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device = backend.check_device(device)
    return Tensor(backend.array_module(device).ones(shape, _factory_dtype(dtype)), requires_grad=requires_grad,
                  device=device)


def randn(*shape, dtype="float32", device=None, requires_grad=False):
    """Standard normal values from tinymem's seeded generator."""
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device = backend.check_device(device)
    return Tensor(random.randn(shape, device, _factory_dtype(dtype, floating=True)), requires_grad=requires_grad,
                  device=device)


def rand(*shape, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device = backend.check_device(device)
    return Tensor(random.rand(shape, device, _factory_dtype(dtype, floating=True)), requires_grad=requires_grad,
                  device=device)


def full(*shape, fill_value, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device = backend.check_device(device)
    return Tensor(backend.array_module(device).full(shape, fill_value, _factory_dtype(dtype)),
                  requires_grad=requires_grad, device=device)


def arange(start, end=None, step=1, dtype=None, device=None):
    """``start, start+step, ...`` below ``end`` (``arange(n)`` is 0..n-1): int64 from ints, float32
    otherwise, on the default device unless ``device`` is given (``torch.arange``)."""
    start, end = (0, start) if end is None else (start, end)
    if dtype is None:
        dtype = "int64" if all(isinstance(v, int) for v in (start, end, step)) else "float32"
    device = backend.check_device(device)
    return Tensor(backend.array_module(device).arange(start, end, step, dtype=_factory_dtype(dtype)), device=device)


def zeros_like(t, dtype=None, device=None, requires_grad=False):
    """Zeros of ``t``'s shape, on ``t``'s device and of its dtype unless told otherwise."""
    return zeros(t.shape, dtype=dtype or t.dtype.name, device=device or t.device, requires_grad=requires_grad)


def ones_like(t, dtype=None, device=None, requires_grad=False):
    """Ones of ``t``'s shape, on ``t``'s device and of its dtype unless told otherwise."""
    return ones(t.shape, dtype=dtype or t.dtype.name, device=device or t.device, requires_grad=requires_grad)


cat = functional.concatenate
stack = functional.stack
where = functional.where
matmul = functional.matmul
