"""tinymem: a from-scratch NumPy/CuPy deep-learning framework that teaches memory-efficient training.

    import tinymem as tm
    x = tm.tensor([[1.0, 2.0]], requires_grad=True)
    with tm.memory.track() as t:
        (x * x).sum().backward()
    print(t.peak_by_bucket())
"""
__version__ = "0.1.0"

from . import backend, memory, random  # noqa: E402
from .autograd import (Function, Tensor, backward, enable_grad, is_grad_enabled, no_grad,  # noqa: E402
                       saved_tensors_hooks, set_grad_enabled, tensor)
from . import functional  # noqa: E402  (installs the Tensor operators)
from . import nn, optim, models, data  # noqa: E402
from . import autograd  # noqa: E402
from .backend import DeviceError, cuda_available  # noqa: E402
from .memory import OutOfMemoryError  # noqa: E402
from .random import get_rng_state, manual_seed, set_rng_state  # noqa: E402
from .serialization import CheckpointError, load, save  # noqa: E402

float16, float32, float64 = "float16", "float32", "float64"
int8, uint8, int32, int64 = "int8", "uint8", "int32", "int64"


def zeros(*shape, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    xp = backend.array_module(backend.check_device(device))
    return Tensor(xp.zeros(shape, backend.resolve_dtype(dtype)), requires_grad=requires_grad)


def ones(*shape, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    xp = backend.array_module(backend.check_device(device))
    return Tensor(xp.ones(shape, backend.resolve_dtype(dtype)), requires_grad=requires_grad)


def randn(*shape, dtype="float32", device=None, requires_grad=False):
    """Standard normal values from tinymem's seeded generator."""
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device = backend.check_device(device)
    return Tensor(random.randn(shape, device, backend.resolve_dtype(dtype)), requires_grad=requires_grad)


def rand(*shape, dtype="float32", device=None, requires_grad=False):
    shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
    device = backend.check_device(device)
    return Tensor(random.rand(shape, device, backend.resolve_dtype(dtype)), requires_grad=requires_grad)


cat = functional.concatenate
stack = functional.stack
where = functional.where
matmul = functional.matmul
