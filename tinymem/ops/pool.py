"""Pooling and nearest-neighbour upsampling over (B, C, H, W) arrays.

All three loop over the kh·kw kernel offsets with strided slices (as im2col does in
``conv.py``), so nothing of size kh·kw times the input is ever built.

Memory saved for backward, per output element of shape (B, C, OH, OW):
- ``max_pool2d``: the position of the maximum inside its window as one uint8 (kh·kw <= 255),
  B·C·OH·OW bytes: 4x less than saving the float input of a 2x2 pool, 16x less than a mask.
- ``avg_pool2d``: nothing (the gradient is spread evenly).
- ``upsample_nearest2d``: nothing (the gradient is summed back over each s x s block).
"""
import numpy as np

from .. import memory
from ..autograd import Function
from ..backend import array_module
from .conv import check_window, out_size


def _window(a, i, j, sh, sw, out_h, out_w):
    """The elements at kernel offset (i, j) of every window: a strided view."""
    return a[:, :, i:i + sh * (out_h - 1) + 1:sh, j:j + sw * (out_w - 1) + 1:sw]


def _geometry(x, kernel, stride, padding, name):
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    if x.ndim != 4:
        raise ValueError(f"{name}: expected input of shape (B, C, H, W), got {x.shape}")
    check_window(name, kernel, stride, padding)
    if 2 * ph > kh or 2 * pw > kw:
        raise ValueError(f"{name}: padding {padding} must be at most half the kernel {kernel}")
    out_h, out_w = out_size(x.shape[2], kh, sh, ph), out_size(x.shape[3], kw, sw, pw)
    if out_h < 1 or out_w < 1:
        raise ValueError(f"{name}: kernel {kernel} is larger than the padded input {x.shape[2:]}")
    return kh, kw, sh, sw, ph, pw, out_h, out_w


class MaxPool2d(Function):
    """Largest value of each kh x kw window (padding counts as -inf, as in PyTorch).

    Ties go to the first position in the window in row-major order, as PyTorch does.
    """

    def forward(ctx, x, kernel=(2, 2), stride=(2, 2), padding=(0, 0)):
        xp = array_module(x)
        kh, kw, sh, sw, ph, pw, out_h, out_w = geo = _geometry(x, kernel, stride, padding, "max_pool2d")
        if kh * kw > 255:
            raise ValueError(f"max_pool2d: kernel {kernel} has more than 255 positions")
        # Padding never wins: -inf, or an integer type's least value (-inf raised OverflowError).
        low = -np.inf if x.dtype.kind == "f" else (np.iinfo(x.dtype).min if x.dtype.kind in "iu" else False)
        xpad = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=low) if ph or pw else x
        best = _window(xpad, 0, 0, sh, sw, out_h, out_w).copy()
        where = memory.register(xp.zeros(best.shape, np.uint8))
        better = memory.register(xp.empty(best.shape, bool))  # one mask, reused: counted
        for k in range(1, kh * kw):
            cand = _window(xpad, k // kw, k % kw, sh, sw, out_h, out_w)
            xp.greater(cand, best, out=better)
            xp.copyto(best, cand, where=better)  # in place: where() made a second best each time
            where[better] = k
        ctx.geo, ctx.x_shape = geo, x.shape
        ctx.save_for_backward(where)
        return best

    def backward(ctx, g):
        (where,) = ctx.saved_tensors
        xp = array_module(g)
        kh, kw, sh, sw, ph, pw, out_h, out_w = ctx.geo
        b, c, h, w = ctx.x_shape
        gpad = memory.register(xp.zeros((b, c, h + 2 * ph, w + 2 * pw), g.dtype))
        share = memory.register(xp.empty(g.shape, g.dtype))  # g where the max was at k: one buffer, reused
        for k in range(kh * kw):
            xp.equal(where, k, out=share)
            share *= g
            _window(gpad, k // kw, k % kw, sh, sw, out_h, out_w)[...] += share
        return gpad[:, :, ph:ph + h, pw:pw + w]


class AvgPool2d(Function):
    """Mean of each kh x kw window; zero padding counts in the mean (PyTorch's
    ``count_include_pad=True``)."""

    def forward(ctx, x, kernel=(2, 2), stride=(2, 2), padding=(0, 0)):
        xp = array_module(x)
        kh, kw, sh, sw, ph, pw, out_h, out_w = geo = _geometry(x, kernel, stride, padding, "avg_pool2d")
        xpad = xp.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw))) if ph or pw else x
        # Integers average to float64 (as a mean does): the sum divided in place needs a float.
        dtype = x.dtype if x.dtype.kind in "fc" else np.dtype(np.float64)
        total = xp.zeros((x.shape[0], x.shape[1], out_h, out_w), dtype)
        for k in range(kh * kw):
            total += _window(xpad, k // kw, k % kw, sh, sw, out_h, out_w)
        ctx.geo, ctx.x_shape = geo, x.shape
        total /= dtype.type(kh * kw)  # in place: the sum is the output
        return total

    def backward(ctx, g):
        xp = array_module(g)
        kh, kw, sh, sw, ph, pw, out_h, out_w = ctx.geo
        b, c, h, w = ctx.x_shape
        share = memory.register(g / g.dtype.type(kh * kw))
        # Counted now, while share is alive: counted on return, it would never meet share.
        gpad = memory.register(xp.zeros((b, c, h + 2 * ph, w + 2 * pw), g.dtype))
        for k in range(kh * kw):
            _window(gpad, k // kw, k % kw, sh, sw, out_h, out_w)[...] += share
        return gpad[:, :, ph:ph + h, pw:pw + w]


class UpsampleNearest2d(Function):
    """Repeat each pixel s x s times: (B, C, H, W) -> (B, C, s·H, s·W)."""

    def forward(ctx, x, scale=2):
        if x.ndim != 4:
            raise ValueError(f"upsample: expected input of shape (B, C, H, W), got {x.shape}")
        ctx.scale = scale
        # Written into the output through a broadcast view: two repeats made an uncounted
        # s·H x W array on the way.
        b, c, h, w = x.shape
        out = array_module(x).empty((b, c, h * scale, w * scale), x.dtype)
        out.reshape(b, c, h, scale, w, scale)[...] = x[:, :, :, None, :, None]
        return out

    def backward(ctx, g):
        s = ctx.scale
        b, c, h, w = g.shape
        return g.reshape(b, c, h // s, s, w // s, s).sum(axis=(3, 5))
