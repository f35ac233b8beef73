"""Elementwise ops: arithmetic, exp/log/sqrt, activations, where.

Memory: each op allocates one output of the broadcast shape. What it saves for backward is in
its docstring; an op that can recompute its derivative from its *output* saves the output,
which the next op usually keeps alive anyway (PyTorch does the same for exp, tanh, sigmoid and
relu), so saving it costs nothing extra.
"""
import math

import numpy as np

from .. import memory
from ..autograd import Function
from ..backend import array_module


def _like(xp, g, y):
    """A new buffer for the gradient of ``y`` given ``g``: the backward passes below write their
    factor into it and multiply by ``g`` in place, so no temporary of ``y``'s size is alive
    beside the gradient (an expression like ``g * (1 - y * y)`` keeps one or two, which the
    ledger does not see; on a GPU each is also a kernel and a pass over memory)."""
    return xp.empty(np.broadcast_shapes(g.shape, y.shape), xp.result_type(g, y))


class Add(Function):
    """a + b. Saves nothing."""

    def forward(ctx, a, b):
        return a + b

    def backward(ctx, g):
        return g, g


class Sub(Function):
    """a - b. Saves nothing."""

    def forward(ctx, a, b):
        return a - b

    def backward(ctx, g):
        return g, (-g if ctx.needs_input_grad[1] else None)


class Mul(Function):
    """a * b. Saves the inputs whose partner needs a gradient."""

    def forward(ctx, a, b):
        ga, gb = ctx.needs_input_grad
        ctx.save_for_backward(b if ga else None, a if gb else None)
        return a * b

    def backward(ctx, g):
        b, a = ctx.saved_tensors
        return (g * b if b is not None else None), (g * a if a is not None else None)


class Div(Function):
    """a / b. Saves b (and a when b needs a gradient)."""

    def forward(ctx, a, b):
        ctx.save_for_backward(a if ctx.needs_input_grad[1] else None, b)
        return a / b

    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga = g / b if ctx.needs_input_grad[0] else None
        gb = -g * a / (b * b) if ctx.needs_input_grad[1] else None
        return ga, gb


class Neg(Function):
    def forward(ctx, a):
        return -a

    def backward(ctx, g):
        return -g


class Pow(Function):
    """a ** b for a tensor or constant exponent. Saves a, an array exponent, and the output
    when b needs a gradient.

    At a = 0 the formulas meet 0 * inf and 0 * log(0); as PyTorch, d/da is 0 where b == 0 and
    d/db is 0 where a == 0 and b >= 0 (the limits), not NaN.
    """

    def forward(ctx, a, b):
        y = a ** b
        needs = ctx.needs_input_grad
        array_exp = hasattr(b, "shape")
        ctx.save_for_backward(a, b if array_exp else None, y if needs[1] else None)
        ctx.scalar_exp = None if array_exp else b
        return y

    def backward(ctx, g):
        a, b, y = ctx.saved_tensors
        xp = array_module(g)
        ga = gb = None
        with np.errstate(divide="ignore", invalid="ignore"):  # 0 ** -1 and log(0), masked below
            if ctx.needs_input_grad[0]:
                exp = ctx.scalar_exp if ctx.scalar_exp is not None else b
                if ctx.scalar_exp is not None:
                    ga = g * exp * a ** (exp - 1) if exp != 0 else xp.zeros_like(g * a)
                else:
                    ga = g * xp.where(exp == 0, 0, exp * a ** (exp - 1))
            if ctx.needs_input_grad[1]:
                gb = g * xp.where((a == 0) & (b >= 0), 0, y * xp.log(a))
        return ga, gb


class Exp(Function):
    """Saves the output (d exp = exp)."""

    def forward(ctx, a):
        y = array_module(a).exp(a)
        ctx.save_for_backward(y)
        return y

    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y


class Log(Function):
    """Saves the input."""

    def forward(ctx, a):
        ctx.save_for_backward(a)
        return array_module(a).log(a)

    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g / a


class Sqrt(Function):
    """Saves the output (d sqrt(a) = 1 / (2 sqrt(a)))."""

    def forward(ctx, a):
        y = array_module(a).sqrt(a)
        ctx.save_for_backward(y)
        return y

    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        xp = array_module(g)
        out = xp.multiply(y, 2, out=_like(xp, g, y))
        return xp.divide(g, out, out=out)


class Tanh(Function):
    """Saves the output (1 - y^2)."""

    def forward(ctx, a):
        y = array_module(a).tanh(a)
        ctx.save_for_backward(y)
        return y

    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        xp = array_module(g)
        out = xp.multiply(y, y, out=_like(xp, g, y))
        xp.subtract(1, out, out=out)
        out *= g
        return out


class Sigmoid(Function):
    """Saves the output (y (1 - y)).

    Computed from e = exp(-|a|), which never overflows: 1 / (1 + e) for a >= 0 and e / (1 + e)
    below, so a small result keeps its digits (the tanh form 0.5 (tanh(a/2) + 1) cancels to 0
    in float32 from a = -17 on, where the true value is still 4e-8).
    """

    def forward(ctx, a):
        # In three counted buffers (e, 1 + e and a 1-byte mask), with the same operations: the
        # written-out where(a >= 0, 1 / (1 + e), e / (1 + e)) kept five uncounted ones alive.
        xp = array_module(a)
        # a's own float dtype, float64 for integers; out=: arrays even when a is 0-d
        dtype = a.dtype if a.dtype.kind in "fc" else np.dtype(np.float64)
        e = memory.register(xp.abs(a, out=xp.empty(a.shape, dtype)))
        xp.negative(e, out=e)
        xp.exp(e, out=e)
        y = memory.register(xp.add(e, 1, out=xp.empty(a.shape, dtype)))
        xp.copyto(e, 1, where=memory.register(a >= 0))  # the numerator: 1 for a >= 0, e below
        xp.divide(e, y, out=y)  # integers were cast back from these floats: 0 and 1
        ctx.save_for_backward(y)
        return y

    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        xp = array_module(g)
        out = xp.subtract(1, y, out=_like(xp, g, y))
        out *= y
        out *= g
        return out


class ReLU(Function):
    """max(a, 0). Saves the output: its sign is the mask.

    Backward writes the mask straight into the gradient's buffer, as 1.0 and 0.0, and multiplies
    by ``g`` in place: no bool mask of 1 B per element alive beside the product (``g * (y > 0)``
    made one, which the ledger never saw: its peak was 0.889 of the GPU pool's)."""

    def forward(ctx, a):
        y = array_module(a).maximum(a, 0)
        ctx.save_for_backward(y)
        return y

    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        xp = array_module(g)
        out = xp.greater(y, 0, out=_like(xp, g, y))
        out *= g  # 0 * nan stays nan, as in g * (y > 0)
        return out


_GELU_C = math.sqrt(2.0 / math.pi)


class GELU(Function):
    """GELU, tanh approximation: 0.5 a (1 + tanh(c (a + 0.044715 a^3))). Saves the input."""

    def keep_for_backward(ctx, out, a):
        # Backward needs only the input: a selective checkpoint may keep GELU's output.
        ctx.save_for_backward(a)

    def forward(ctx, a):
        GELU.keep_for_backward(ctx, None, a)
        # The same arithmetic, in the same order, as 0.5 a (1 + tanh(c (a + 0.044715 a^3))), in
        # one buffer: the plain expression makes seven temporaries the size of ``a``.
        xp = array_module(a)
        t = xp.multiply(a, 0.044715, out=xp.empty_like(a))  # out=: an array even when a is 0-d
        t *= a
        t *= a
        t += a
        t *= _GELU_C
        xp.tanh(t, out=t)
        t += 1
        t *= a
        t *= 0.5
        return t

    def backward(ctx, g):
        """g · GELU'(a) = g · (1 + t)(0.5 + w(1 - t)), with t = tanh(c·a·(1 + 0.044715 a²)) and
        w = 0.5·a·c·(1 + 3·0.044715 a²): the derivative 0.5(1 + t) + 0.5·a·(1 - t²)·c·(1 +
        3·0.044715 a²) with 1 - t² = (1 - t)(1 + t). Two buffers of a's size, counted as
        workspace (written out, the formula makes about ten temporaries, four alive at once)."""
        (a,) = ctx.saved_tensors
        xp = array_module(a)
        w = memory.register(xp.multiply(a, a, out=xp.empty_like(a)))  # a², then w
        t = memory.register(xp.multiply(w, 0.044715, out=xp.empty_like(a)))
        t += 1
        t *= a
        t *= _GELU_C
        xp.tanh(t, out=t)
        w *= 3 * 0.044715
        w += 1
        w *= _GELU_C
        w *= a
        w *= 0.5
        t *= -1
        t += 1  # 1 - t
        w *= t
        w += 0.5
        t *= -1
        t += 2  # 1 + t
        w *= t
        xp.multiply(g, w, out=w)  # the gradient returned, in w's buffer: no third array
        return w


class Where(Function):
    """where(cond, a, b). Saves the condition (1 byte per element)."""

    def forward(ctx, cond, a, b):
        ctx.save_for_backward(cond)
        return array_module(cond).where(cond, a, b)

    def backward(ctx, g):
        (cond,) = ctx.saved_tensors
        zero = g.dtype.type(0)
        return (None, g * cond if ctx.needs_input_grad[1] else None,
                array_module(g).where(cond, zero, g) if ctx.needs_input_grad[2] else None)


class Abs(Function):
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return array_module(a).abs(a)

    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        xp = array_module(g)
        out = xp.sign(a, out=_like(xp, g, a))
        out *= g
        return out


class Clamp(Function):
    """clip(a, lo, hi). Saves a 1-byte mask of the elements inside the range."""

    def forward(ctx, a, lo=None, hi=None):
        xp = array_module(a)
        inside = xp.ones(a.shape, bool)
        if lo is not None:
            inside &= a >= lo
        if hi is not None:
            inside &= a <= hi
        ctx.save_for_backward(inside)
        return xp.clip(a, lo, hi)

    def backward(ctx, g):
        (inside,) = ctx.saved_tensors
        return g * inside
