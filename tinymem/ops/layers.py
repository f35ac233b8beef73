"""The ops behind nn's layers, fused so that each saves only what its backward needs.

Memory of each (B rows, D features, float32 = 4 bytes):
- ``linear``: saves the input x (B x in) and the weight (already a parameter): 4·B·in new bytes.
- ``layer_norm``: saves the normalised input (4·B·D) and 1/std (4·B).
- ``dropout``: saves the keep-mask as bytes (B·D), not floats: 4x less than a float mask.
- ``embedding``: saves the indices (8·N); the gradient is a dense table (``embedding_bag`` with
  ``sparse=True`` gives a row-sparse one).
"""

from .. import memory, random
from ..autograd import Function
from ..backend import array_module, device_of, scatter_add
from .rows import check_ids, gather_rows, scatter_ids


class Linear(Function):
    """y = x W^T + b with W of shape (out, in), as PyTorch's ``F.linear``."""

    def keep_for_backward(ctx, out, x, w, b=None):
        try:
            kind = x.dtype.kind
        except AttributeError:  # a list or a number: NumPy would not say which argument
            raise TypeError(f"linear: input must be a Tensor or an array, got a {type(x).__name__}") from None
        if kind not in "fc":
            # NumPy would promote an int input against float32 weights to float64, silently.
            raise TypeError(f"linear: input of dtype {x.dtype} with weight of dtype {w.dtype}; "
                            f"convert the input first, e.g. x.float() or x.to(dtype='{w.dtype}')")
        # Slices, not indices: a 0-d input or a 1-d weight fails the test instead of raising.
        if x.shape[-1:] != w.shape[1:] or w.ndim != 2:
            raise ValueError(f"linear: input of shape {x.shape} does not fit weight of shape {w.shape}; "
                             "expected input (..., in_features) and weight (out_features, in_features)")
        if b is not None and b.shape != w.shape[:1]:  # a bias of shape (1,) would broadcast silently
            raise ValueError(f"linear: bias of shape {b.shape} for weight of shape {w.shape}; "
                             f"it must be ({w.shape[0]},)")
        gx, gw = ctx.needs_input_grad[:2]
        ctx.save_for_backward(x if gw else None, w if gx else None)

    def forward(ctx, x, w, b=None):
        Linear.keep_for_backward(ctx, None, x, w, b)
        y = x @ w.T
        if b is not None:
            y += b
        return y

    def backward(ctx, g):
        x, w = ctx.saved_tensors
        needs = ctx.needs_input_grad
        gx = g @ w if needs[0] else None
        gw = gb = None
        if needs[1]:
            g2 = g.reshape(-1, g.shape[-1])
            gw = g2.T @ x.reshape(-1, x.shape[-1])
        if len(needs) > 2 and needs[2]:
            gb = g.reshape(-1, g.shape[-1]).sum(0)
        return gx, gw, gb


def scale_shift(xp, xhat, weight, bias, out):
    """``xhat * weight + bias`` (either may be None) written into ``out``, a buffer of xhat's
    shape and dtype the caller is done with, so the output costs no new array. A weight or bias
    of a wider dtype gives a new array instead, promoted as NumPy would. Shared by the norms."""
    y = out
    if weight is None:
        y[...] = xhat
    elif xp.result_type(xhat, weight) == y.dtype:
        xp.multiply(xhat, weight, out=y)
    else:
        y = xhat * weight
    if bias is not None:
        if xp.result_type(y, bias) == y.dtype:
            y += bias
        else:
            y = y + bias
    return y


class LayerNorm(Function):
    """Normalise over the last dimensions, then scale and shift. Saves x-hat and 1/std."""

    def forward(ctx, x, weight=None, bias=None, normalized_ndim=1, eps=1e-5):
        xp = array_module(x)
        if x.dtype.kind != "f":  # 1/std would be cast to the integer dtype: 0
            raise TypeError(f"layer_norm: input of dtype {x.dtype}; convert it first, e.g. x.float()")
        if not eps > 0:
            raise ValueError(f"layer_norm: eps must be > 0, got {eps}")
        axes = tuple(range(x.ndim - normalized_ndim, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        # Two arrays of x's size, counted as workspace while they are temporaries: the centred
        # values, made x-hat in place (and saved), and their squares, whose buffer then holds
        # the output. The same arithmetic in the same order as the plain formulas, which make
        # five such arrays.
        xhat = memory.register(x - mean)
        squares = memory.register(xhat * xhat)
        var = squares.mean(axis=axes, keepdims=True)
        rstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype)
        xhat *= rstd
        ctx.axes = axes
        ctx.save_for_backward(xhat, rstd, weight)
        if weight is None and bias is None:
            return xhat
        return scale_shift(xp, xhat, weight, bias, out=squares)

    def backward(ctx, g):
        """gx = rstd·(ĝ - mean(ĝ) - x̂·sum(ĝ·x̂)/n) with ĝ = g·weight, gw = sum(g·x̂), gb = sum(g).
        Workspace: ĝ and one product buffer of x's size (the plain formulas make four more)."""
        xhat, rstd, weight = ctx.saved_tensors
        axes = ctx.axes
        lead = tuple(range(g.ndim - len(axes)))
        want_gw = weight is not None and ctx.needs_input_grad[1]
        gb = g.sum(axis=lead) if len(ctx.needs_input_grad) > 2 and ctx.needs_input_grad[2] else None
        n = 1
        for a in axes:
            n *= g.shape[a]
        if not (g.dtype == xhat.dtype == rstd.dtype and (weight is None or weight.dtype == g.dtype)):
            # Mixed dtypes: the formulas as written, so that NumPy promotes as it would.
            gw = (g * xhat).sum(axis=lead) if want_gw else None
            gxhat = g * weight if weight is not None else g
            gx = rstd * (gxhat - gxhat.mean(axis=axes, keepdims=True)
                         - xhat * (gxhat * xhat).sum(axis=axes, keepdims=True) / n)
            return gx, gw, gb
        xp = array_module(g)
        work = memory.register(g * xhat)  # g·x̂ for gw, then ĝ·x̂, then x̂·sum(ĝ·x̂)/n
        gw = work.sum(axis=lead) if want_gw else None
        gxhat = memory.register(g * weight) if weight is not None else g
        xp.multiply(gxhat, xhat, out=work)
        dot = work.sum(axis=axes, keepdims=True)
        xp.multiply(xhat, dot, out=work)
        work /= n
        # The gradient returned, counted now: it exists beside the two buffers above.
        gx = memory.register(gxhat - gxhat.mean(axis=axes, keepdims=True))
        gx -= work
        gx *= rstd
        return gx, gw, gb


class Dropout(Function):
    """Zero each element with probability p and scale the rest by 1/(1-p).

    The mask comes from tinymem's seeded RNG, so restoring the RNG state (as checkpointing
    does) redraws the same mask.
    """

    def forward(ctx, x, p=0.5):
        # The uniform draws are a workspace array of x's size until the mask is made.
        keep = memory.register(random.rand(x.shape, device_of(x))) >= p
        ctx.scale = 1.0 / (1.0 - p)
        ctx.save_for_backward(keep)
        out = x * keep
        out *= x.dtype.type(ctx.scale)  # in place: (x * keep) * scale would make one more array
        return out

    def backward(ctx, g):
        (keep,) = ctx.saved_tensors
        out = g * keep
        out *= g.dtype.type(ctx.scale)
        return out


class Embedding(Function):
    """Rows of a table: ``weight[indices]``. Saves the indices; the gradient is a dense table
    of the weight's size with the used rows summed into it."""

    def forward(ctx, indices, weight):
        if indices.dtype.kind not in "iu":
            raise TypeError(f"embedding indices must be integers, got {indices.dtype}")
        if weight.ndim != 2:  # a 1-d table would give one number per index, silently
            raise ValueError(f"embedding: weight must be a 2-d table (num_embeddings, embedding_dim), "
                             f"got shape {weight.shape}")
        xp = array_module(weight)
        check_ids(xp, indices, weight.shape[0], "embedding indices")  # see ops/rows.py: no sync on a device
        ctx.num_rows = weight.shape[0]
        ctx.save_for_backward(indices)
        return gather_rows(xp, weight, indices)

    def backward(ctx, g):
        (indices,) = ctx.saved_tensors
        xp = array_module(g)
        out = xp.zeros((ctx.num_rows, g.shape[-1]), g.dtype)
        indices, rows = scatter_ids(xp, indices.reshape(-1), g.reshape(-1, g.shape[-1]), ctx.num_rows)
        scatter_add(xp, out, indices, rows)
        return None, out
