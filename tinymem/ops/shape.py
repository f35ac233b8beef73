"""Ops that move elements around: reshape, transpose/permute, indexing, concatenate, stack,
and the device/dtype cast.

Memory: reshape and transpose return views (no new bytes, nothing saved); indexing copies the
selected elements and saves the index; concatenate and stack allocate the joined array and save
only the split points.
"""
import numpy as np

from .. import backend
from ..autograd import Function, Tensor
from ..backend import array_module, scatter_add
from ..checks import axis_index


class Reshape(Function):
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        try:
            return a.reshape(shape)
        except ValueError as exc:
            raise ValueError(f"reshape: cannot view shape {a.shape} as {tuple(shape)}") from exc

    def backward(ctx, g):
        return g.reshape(ctx.in_shape)


class Permute(Function):
    def forward(ctx, a, dims):
        if sorted(d % a.ndim for d in dims) != list(range(a.ndim)):
            raise ValueError(f"permute: {tuple(dims)} is not a permutation of the {a.ndim} dims of {a.shape}")
        ctx.dims = tuple(d % a.ndim for d in dims)
        return a.transpose(ctx.dims)

    def backward(ctx, g):
        return g.transpose(np.argsort(ctx.dims))


def unwrap_index(index):
    """Replace Tensors inside an index by their arrays."""
    if isinstance(index, Tensor):
        return index.data
    if isinstance(index, tuple):
        return tuple(i.data if isinstance(i, Tensor) else i for i in index)
    return index


def _is_basic(index):
    items = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, (int, slice, type(None), type(Ellipsis))) for i in items)


_SLOT = object()  # marks where an index array sat (None already means "new axis")


def _axes(item, rest):
    """How many axes of the indexed array one index item consumes (``rest`` for the Ellipsis)."""
    if item is None:
        return 0
    if item is Ellipsis:
        return rest
    return item.ndim if getattr(item, "dtype", None) == bool else 1


def _check_bounds(items, shape):
    """Raise NumPy's IndexError for a host integer index array out of range of its axis."""
    rest = len(shape) - sum(_axes(i, 0) for i in items)
    axis = 0
    for item in items:
        if isinstance(item, np.ndarray) and item.dtype.kind in "iu" and item.size and axis < len(shape):
            size = shape[axis]
            for value in (int(item.min()), int(item.max())):
                if not -size <= value < size:
                    raise IndexError(f"index {value} is out of bounds for axis {axis} with size {size}")
        axis += _axes(item, rest)


def _on_device(items, a):
    """The index ``items`` with every index array (a list, a NumPy or CuPy array) on ``a``'s device.
    A host integer array is checked against ``a``'s shape on the host first, for free: CuPy wraps
    an index out of range around without a word where NumPy raises IndexError, so ``x[[5]]`` of 3
    rows would read row 2 on a GPU. (An index array made on the GPU is not checked: that would
    wait for the GPU.) An empty list selects nothing, as in NumPy. Memory: one copy of each
    host index array."""
    items = tuple(np.asarray(i, np.intp if len(i) == 0 else None) if isinstance(i, list) else i for i in items)
    device = backend.device_of(a)
    if device == "cpu":  # NumPy checks the bounds itself
        return tuple(backend.to_numpy(i) if hasattr(i, "__cuda_array_interface__") else i
                     for i in items)
    _check_bounds(items, a.shape)
    return tuple(backend.to_device(i, device) if isinstance(i, np.ndarray) else i for i in items)


class GetItem(Function):
    """``a[index]``: basic slicing gives a view and saves nothing; advanced (array) indexing
    copies the selected elements and saves the index arrays."""

    def forward(ctx, a, index):
        ctx.in_shape = a.shape
        items = _on_device(index if isinstance(index, tuple) else (index,), a)
        ctx.tuple_index = isinstance(index, tuple)
        arrays = [i for i in items if hasattr(i, "shape")]
        # Remember the index with its arrays left out; they go through save_for_backward.
        ctx.template = tuple(_SLOT if hasattr(i, "shape") else i for i in items)
        ctx.save_for_backward(*arrays)
        index = items if ctx.tuple_index else items[0]
        return a[index]

    def backward(ctx, g):
        xp = array_module(g)
        out = xp.zeros(ctx.in_shape, g.dtype)
        arrays = iter(ctx.saved_tensors)
        items = tuple(next(arrays) if i is _SLOT else i for i in ctx.template)
        index = items if ctx.tuple_index else items[0]
        if _is_basic(index):
            out[index] = g
        else:
            scatter_add(xp, out, index, g)
        return out


class Concatenate(Function):
    def forward(ctx, *arrays, axis=0):
        ctx.axis = axis = axis_index("concatenate", axis, arrays[0].ndim)
        ctx.sizes = [a.shape[axis] if a.ndim > axis else None for a in arrays]
        try:
            return array_module(arrays[0]).concatenate(arrays, axis=axis)
        except ValueError as exc:
            raise ValueError(f"concatenate along axis {axis}: shapes {[a.shape for a in arrays]} do not fit") from exc

    def backward(ctx, g):
        splits = np.cumsum(ctx.sizes)[:-1].tolist()
        return tuple(array_module(g).split(g, splits, axis=ctx.axis))


class Stack(Function):
    def forward(ctx, *arrays, axis=0):
        if len({a.shape for a in arrays}) != 1:
            raise ValueError(f"stack needs tensors of one shape, got {[a.shape for a in arrays]}")
        ctx.axis = axis = axis_index("stack", axis, arrays[0].ndim + 1)
        return array_module(arrays[0]).stack(arrays, axis=axis)

    def backward(ctx, g):
        xp = array_module(g)
        return tuple(xp.take(g, i, axis=ctx.axis) for i in range(g.shape[ctx.axis]))


class ToDeviceCast(Function):
    """Copy to another device and/or cast; the gradient goes back the same way."""

    def forward(ctx, a, device, dtype):
        ctx.src_device, ctx.src_dtype = backend.device_of(a), a.dtype
        out = backend.to_device(a, device) if device is not None else a
        if dtype is not None and out.dtype != dtype:
            out = out.astype(dtype)
        return out

    def backward(ctx, g):
        g = backend.to_device(g, ctx.src_device)
        return g.astype(ctx.src_dtype) if g.dtype != ctx.src_dtype else g


def to_device_cast(t, device=None, dtype=None):
    device = backend.check_device(device) if device is not None else None
    dtype = backend.resolve_dtype(dtype)
    if (device is None or device == t.device) and (dtype is None or dtype == t.dtype):
        return t
    return ToDeviceCast.apply(t, device, dtype)
