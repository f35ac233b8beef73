"""Tensor: an array with an optional gradient and a link to the op that made it.

The ledger counts a tensor's ``data`` in the tensor's bucket (``workspace`` unless it is a
Parameter, a gradient or optimizer state); assigning ``.data`` or ``.grad`` re-registers the new
array. ``tensor()`` makes a leaf; Python floats give float32 and ints int64, as in PyTorch.
"""
import numpy as np

from .. import backend, memory
from ..memory import register
from .engine import run_backward

_new_object = object.__new__  # not cls.__new__: an attribute of a class is looked up anew per call


def _as_array(data, dtype, device):
    xp = backend.array_module(device)
    if isinstance(data, Tensor):
        data = data.data
    if backend.device_of(data) != device and hasattr(data, "shape"):
        data = backend.to_device(data, device)
    if dtype is None:
        arr = xp.asarray(data)
        if arr.dtype == np.float64 and not hasattr(data, "dtype"):
            arr = arr.astype(np.float32)  # Python floats become float32, as in PyTorch
        elif arr.dtype.kind in "iu" and not hasattr(data, "dtype"):
            arr = arr.astype(np.int64)
    else:
        arr = xp.asarray(data, dtype=dtype)
    return arr


class Tensor:
    """An array with an optional gradient and a link to the op that made it.

    Attributes: ``data`` (the NumPy or CuPy array), ``grad`` (a Tensor or ``None``),
    ``requires_grad``, ``shape``, ``dtype``, ``device``. The ledger counts ``data`` in the
    tensor's bucket (``workspace`` unless it is a Parameter, a gradient or optimizer state).

    Its operators and array methods (``+ - * / @ ** []``, comparisons, ``sum``, ``reshape``,
    ``to``, ...) are differentiable ops, declared in one table, ``TENSOR_METHODS`` in
    ``tinymem/functional.py``, which ``tinymem/__init__.py`` attaches to this class.
    """

    __array_priority__ = 1000  # so ndarray + Tensor calls Tensor.__radd__
    __hash__ = object.__hash__  # == is elementwise, yet tensors key dicts (optimizer state)
    _bucket = "workspace"

    def __init__(self, data, requires_grad=False, dtype=None, device=None):
        # Without device=: a Tensor or a device array stays where it is; anything else (lists,
        # NumPy arrays) goes to the default device, as torch.tensor does.
        if device is not None:
            device = backend.check_device(device)
        elif isinstance(data, Tensor) or hasattr(data, "__cuda_array_interface__"):
            device = backend.device_of(data.data if isinstance(data, Tensor) else data)
        else:
            device = backend.default_device()
        self._data = None
        self.data = _as_array(data, backend.resolve_dtype(dtype), device)
        self._ctx = None
        self._index = 0
        self._grad = None
        self.requires_grad = bool(requires_grad)
        if requires_grad and self._data.dtype.kind not in "fc":
            raise TypeError(f"only floating-point tensors can require gradients, not {self._data.dtype}")

    @classmethod
    def wrap(cls, array, requires_grad=False, ctx=None, index=0, bucket=None):
        """Wrap an existing array as a Tensor without copying or checking it (the seam for ops
        and techniques). It is registered in the ledger in ``bucket`` (the class's default,
        ``workspace`` for a plain Tensor). Memory: none beyond the array itself.

        ``Function.apply`` writes this out for an op's one output (a call per op is time a tiny
        op notices): a field added here goes there too."""
        t = _new_object(cls)
        if bucket is None:
            bucket = cls._bucket
        else:
            t._bucket = bucket
        t._data, t._ctx, t._index, t._grad, t.requires_grad = array, ctx, index, None, requires_grad
        register(array, bucket)
        return t

    # -- data and grad ---------------------------------------------------------------------
    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, value):
        if isinstance(value, Tensor):
            value = value.data
        memory.register(value, self._bucket)
        self._data = value

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                value = Tensor.wrap(value, bucket="gradient")
            if value.shape != self.shape:
                raise ValueError(f"assigned grad of shape {value.shape} to a tensor of shape {self.shape}")
            if value.dtype.kind != "f" and self._data.dtype.kind == "f":  # Adam's in-place update cannot cast
                raise TypeError(f"assigned grad of dtype {value.dtype} to a {self._data.dtype} tensor; "
                                "a gradient must be floating, e.g. g.astype(np.float32)")
            value._bucket = "gradient"
            memory.register(value.data, "gradient")
        self._grad = value

    @property
    def shape(self):
        return self._data.shape

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def size(self):
        return self._data.size

    @property
    def nbytes(self):
        return self._data.nbytes

    @property
    def device(self):
        return backend.device_of(self._data)

    @property
    def is_leaf(self):
        return self._ctx is None

    @property
    def grad_fn(self):
        return self._ctx

    def numel(self):
        return self._data.size

    def dim(self):
        return self._data.ndim

    def __len__(self):
        return len(self._data)

    def __repr__(self):
        extra = f", grad_fn={type(self._ctx).__name__}" if self._ctx is not None else (
            ", requires_grad=True" if self.requires_grad else "")
        dev = "" if self.device == "cpu" else ", device='cuda'"
        return f"tensor({backend.to_numpy(self._data)!r}{dev}{extra})"

    # -- conversion ------------------------------------------------------------------------
    def numpy(self):
        """The values as a NumPy array (copied from the GPU when needed)."""
        return backend.to_numpy(self._data)

    def item(self):
        if self._data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self._data.reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def detach(self):
        """A new leaf sharing this tensor's data, outside the graph."""
        return Tensor.wrap(self._data)

    def requires_grad_(self, flag=True):
        if flag and self._data.dtype.kind not in "fc":
            raise TypeError(f"only floating-point tensors can require gradients, not {self._data.dtype}; "
                            "convert first, e.g. t.float().requires_grad_()")
        self.requires_grad = bool(flag)
        return self

    def clone(self):
        """A copy (differentiable for floating tensors; other dtypes keep their dtype)."""
        if self._data.dtype.kind not in "fc":
            return Tensor(self._data.copy(), device=self.device)
        return self * 1

    # -- backward --------------------------------------------------------------------------
    def backward(self, grad=None, retain_graph=False):
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        ``grad`` is required unless this tensor has one element (the usual scalar loss).
        """
        run_backward((self,), (_initial_grad(self, grad, "this tensor"),), retain_graph=retain_graph)

    def zero_(self):
        """Zero the array in place. Pitfall: tinymem keeps no version counter, so zeroing (or any
        in-place write to) an array that an op saved for backward is not detected, as PyTorch
        detects it: the gradient is then computed from the new values, silently."""
        self._data[...] = 0
        return self


def tensor(data, requires_grad=False, dtype=None, device=None):
    """Make a leaf Tensor. Python floats give float32. Without ``device=``, lists and NumPy
    arrays go to the default device (``tm.set_default_device``); a Tensor or CuPy array stays.

    Unlike ``torch.tensor``, which always copies, an array of the right dtype and device is
    used as it is, not copied (as ``torch.as_tensor`` does): wrapping a batch costs no memory,
    and writing to the array later changes the tensor. Pass ``data.copy()`` for a copy.
    """
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


def backward(tensors, grad_tensors=None, retain_graph=False):
    """Backward from several outputs at once (``torch.autograd.backward``)."""
    tensors = list(tensors)
    if grad_tensors is None:
        grad_tensors = [None] * len(tensors)
    if len(grad_tensors) != len(tensors):
        raise ValueError(f"backward: {len(grad_tensors)} gradients for {len(tensors)} tensors")
    grads = [_initial_grad(t, g, f"tensor {i}") for i, (t, g) in enumerate(zip(tensors, grad_tensors))]
    run_backward(tensors, grads, retain_graph=retain_graph)


def _initial_grad(t, grad, what):
    """The gradient backward starts from at ``t``: ``grad`` checked, or ones for a scalar."""
    if not t.requires_grad:
        raise RuntimeError(f"backward: {what} does not require grad (no input had requires_grad=True, "
                           "or it was made under no_grad())")
    xp = backend.array_module(t.data)
    if grad is None:
        if t.size != 1:
            raise RuntimeError(f"backward: grad can be implicitly created only for scalar outputs; {what} "
                               f"has shape {t.shape}: pass backward(grad) of that shape")
        return xp.ones(t.shape, t.dtype)
    g = grad.data if isinstance(grad, Tensor) else xp.asarray(grad, dtype=t.dtype)
    if g.shape != t.shape:
        raise ValueError(f"backward: grad of shape {g.shape} for {what} of shape {t.shape}")
    return g
