"""Reductions (sum, mean, max) and matrix multiplication.

Memory: a reduction's output is small; ``sum``/``mean`` save nothing (only the input shape),
``max`` saves a 1-byte mask of the winners. ``matmul`` saves both inputs (unless one needs no
gradient, then only the other).
"""
from ..autograd import Function
from ..backend import array_module


def _axes(axis, ndim):
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise IndexError(f"axis {a} is out of range for a tensor with {ndim} dimensions")
        out.append(a % ndim)
    return tuple(sorted(out))


def _expand(g, shape, axes, keepdims):
    """Put back the reduced axes so ``g`` broadcasts against the input."""
    if not keepdims:
        for a in axes:
            g = array_module(g).expand_dims(g, a)
    return g


class Sum(Function):
    def forward(ctx, a, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims, ctx.in_shape = _axes(axis, a.ndim), keepdims, a.shape
        return a.sum(axis=ctx.axes, keepdims=keepdims)

    def backward(ctx, g):
        g = _expand(g, ctx.in_shape, ctx.axes, ctx.keepdims)
        return array_module(g).broadcast_to(g, ctx.in_shape)


class Mean(Function):
    def forward(ctx, a, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims, ctx.in_shape = _axes(axis, a.ndim), keepdims, a.shape
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
        ctx.axes, ctx.keepdims = _axes(axis, a.ndim), keepdims
        y = a.max(axis=ctx.axes, keepdims=True)
        mask = a == y
        ctx.save_for_backward(mask)
        return y if keepdims else y.reshape([n for i, n in enumerate(y.shape) if i not in ctx.axes])

    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        g = _expand(g, mask.shape, ctx.axes, ctx.keepdims)
        count = mask.sum(axis=ctx.axes, keepdims=True)
        return g * mask / count


class MatMul(Function):
    """Batched, broadcasting matrix product (NumPy's ``matmul`` rules, 1-D operands included).

    Saves a (when b needs a gradient) and b (when a does). Cost: for (m, k) @ (k, n), forward
    2mkn flops, backward 4mkn.
    """

    def forward(ctx, a, b):
        ga, gb = ctx.needs_input_grad
        ctx.save_for_backward(a if gb else None, b if ga else None)
        ctx.nd = (a.ndim, b.ndim)
        return a @ b

    def backward(ctx, g):
        a, b = ctx.saved_tensors
        xp = array_module(g)
        nda, ndb = ctx.nd
        # Promote 1-D operands to matrices the way matmul does, then undo it.
        if nda == 1:
            g = xp.expand_dims(g, -2)
        if ndb == 1:
            g = xp.expand_dims(g, -1)
        ga = gb = None
        if b is not None:
            bm = b.reshape(-1, 1) if ndb == 1 else b
            ga = g @ xp.swapaxes(bm, -1, -2)
            if nda == 1:
                ga = ga.reshape(ga.shape[:-2] + (ga.shape[-1],))
                ga = ga.reshape(-1, ga.shape[-1]).sum(0) if ga.ndim > 1 else ga
        if a is not None:
            am = a.reshape(1, -1) if nda == 1 else a
            gb = xp.swapaxes(am, -1, -2) @ g
            if ndb == 1:
                gb = gb.reshape(gb.shape[:-1])
                gb = gb.reshape(-1, gb.shape[-1]).sum(0) if gb.ndim > 1 else gb
        return ga, gb
