"""Reductions (sum, mean, max) and matrix multiplication.

Memory: a reduction's output is small; ``sum``/``mean`` save nothing (only the input shape),
``max`` saves a 1-byte mask of the winners. ``matmul`` saves both inputs (unless one needs no
gradient, then only the other).
"""
import numpy as np

from ..autograd import Function, sum_to
from ..backend import array_module
from ..checks import axis_index


def _axes(op, axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    return tuple(sorted(axis_index(op, a, ndim) for a in axes))


def _expand(g, shape, axes, keepdims):
    """Put back the reduced axes so ``g`` broadcasts against the input."""
    if not keepdims:
        for a in axes:
            g = array_module(g).expand_dims(g, a)
    return g


class Sum(Function):
    def forward(ctx, a, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims, ctx.in_shape = _axes("sum", axis, a.ndim), keepdims, a.shape
        return a.sum(axis=ctx.axes, keepdims=keepdims)

    def backward(ctx, g):
        g = _expand(g, ctx.in_shape, ctx.axes, ctx.keepdims)
        return array_module(g).broadcast_to(g, ctx.in_shape)


class Mean(Function):
    def forward(ctx, a, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims, ctx.in_shape = _axes("mean", axis, a.ndim), keepdims, a.shape
        ctx.count = 1
        for ax in ctx.axes:
            ctx.count *= a.shape[ax]
        return a.mean(axis=ctx.axes, keepdims=keepdims)

    def backward(ctx, g):
        g = _expand(g, ctx.in_shape, ctx.axes, ctx.keepdims) / ctx.count
        return array_module(g).broadcast_to(g, ctx.in_shape)


class Max(Function):
    """Maximum over axes; ties share the gradient equally (like PyTorch's ``amax``)."""

    def forward(ctx, a, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims = _axes("max", axis, a.ndim), keepdims
        y = a.max(axis=ctx.axes, keepdims=True)
        mask = a == y
        ctx.save_for_backward(mask)
        return y if keepdims else y.reshape([n for i, n in enumerate(y.shape) if i not in ctx.axes])

    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        g = _expand(g, mask.shape, ctx.axes, ctx.keepdims)
        xp = array_module(g)
        # In g's dtype and one buffer: g * mask / count made a float64 array (an int64 count
        # promotes float32) beside the product, uncounted. The count itself (one number per
        # output) is float64: counted in float16 it stops at 2048 exactly and overflows to inf
        # past 65504 ties (the max of 70,000 zeros got a gradient of 0, not 1/70,000).
        count = mask.sum(axis=ctx.axes, keepdims=True, dtype=np.float64)
        out = xp.multiply(g, mask, out=xp.empty(mask.shape, g.dtype))
        out /= count
        return out


class MatMul(Function):
    """Batched, broadcasting matrix product (NumPy's ``matmul`` rules, 1-D operands included).

    Saves a (when b needs a gradient) and b (when a does). Cost: for (m, k) @ (k, n), forward
    2mkn flops, backward 4mkn.
    """

    def keep_for_backward(ctx, out, a, b):
        ga, gb = ctx.needs_input_grad
        ctx.save_for_backward(a if gb else None, b if ga else None)
        ctx.shapes = (a.shape, b.shape)

    def forward(ctx, a, b):
        MatMul.keep_for_backward(ctx, None, a, b)
        return a @ b

    def backward(ctx, g):
        a, b = ctx.saved_tensors
        xp = array_module(g)
        sa, sb = ctx.shapes
        # Promote 1-D operands to matrices as matmul does: (k,) -> (1, k) on the left,
        # (k,) -> (k, 1) on the right; the output gets the matching unit axes back.
        pa = (1,) + sa if len(sa) == 1 else sa
        pb = sb + (1,) if len(sb) == 1 else sb
        batch = np.broadcast_shapes(pa[:-2], pb[:-2])  # shapes are host tuples on both backends
        g = g.reshape(tuple(batch) + (pa[-2], pb[-1]))
        ga = gb = None
        if b is not None:
            ga = sum_to(g @ xp.swapaxes(b.reshape(pb), -1, -2), pa).reshape(sa)
        if a is not None:
            gb = sum_to(xp.swapaxes(a.reshape(pa), -1, -2) @ g, pb).reshape(sb)
        return ga, gb
