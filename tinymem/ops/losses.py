"""Softmax, log-softmax and the losses, fused so that each saves only what its backward needs.

Memory of each (B rows, C classes, float32 = 4 bytes):
- ``softmax``: saves its output (4·B·C).  ``log_softmax``: saves softmax(x) (4·B·C).
- ``cross_entropy``: saves the probabilities (4·B·C) and the targets (8·B).
- ``mse_loss``: saves the difference (4·N).
- ``huber_loss``: saves the difference (4·N).
"""
import numpy as np

from .. import memory
from ..autograd import Function
from ..backend import array_module
from ..checks import axis_index


def _reduce(losses, reduction):
    """The mean, the sum, or (``"none"``) the per-element losses themselves."""
    if reduction == "mean":
        return losses.mean()
    if reduction == "sum":
        return losses.sum()
    if reduction == "none":
        return losses
    raise ValueError(f"unknown reduction {reduction!r}; choose 'mean', 'sum' or 'none'")


def _check_not_empty(name, count, reduction):
    """A mean over no samples is 0/0: refuse it here rather than return NaN with warnings."""
    if count == 0 and reduction == "mean":
        raise ValueError(f"{name} of an empty batch: the mean over 0 samples is undefined; skip "
                         "empty batches (a DataLoader with drop_last) or use reduction='sum'")


def _row_max(xp, x, axis):
    """``x.max(axis, keepdims=True)``, the shift that keeps exp from overflowing; zeros when the
    axis is empty (NumPy and CuPy refuse a max over nothing; the softmax of nothing is empty,
    as in PyTorch)."""
    if x.shape[axis] == 0:
        return xp.zeros(x.shape[:axis] + (1,) + x.shape[axis + 1:], x.dtype)
    return x.max(axis=axis, keepdims=True)


class Softmax(Function):
    def forward(ctx, x, axis=-1):
        xp, axis = array_module(x), axis_index("softmax", axis, x.ndim)
        e = xp.exp(x - _row_max(xp, x, axis))
        y = e / e.sum(axis=axis, keepdims=True)
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    def backward(ctx, g):
        """y (g - sum(g y)), in one buffer of y's size (the expression made two beside it)."""
        (y,) = ctx.saved_tensors
        xp = array_module(g)
        out = xp.multiply(g, y, out=xp.empty(y.shape, xp.result_type(g, y)))
        total = out.sum(axis=ctx.axis, keepdims=True)
        xp.subtract(g, total, out=out)
        out *= y
        return out


class LogSoftmax(Function):
    def forward(ctx, x, axis=-1):
        xp, axis = array_module(x), axis_index("log_softmax", axis, x.ndim)
        shifted = x - _row_max(xp, x, axis)
        # An empty axis has nothing to normalise (the log of its empty sum would warn of log(0)).
        lse = xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True)) if x.shape[axis] else 0
        y = shifted - lse
        ctx.axis = axis
        ctx.save_for_backward(xp.exp(y))
        return y

    def backward(ctx, g):
        """g - p sum(g), in one buffer of p's size (the expression made one more beside it)."""
        (p,) = ctx.saved_tensors
        xp = array_module(g)
        out = xp.multiply(p, g.sum(axis=ctx.axis, keepdims=True), out=xp.empty(p.shape, xp.result_type(g, p)))
        return xp.subtract(g, out, out=out)


class CrossEntropy(Function):
    """Cross-entropy of logits (N, C) against integer targets (N,), numerically stable."""

    def forward(ctx, logits, target, reduction="mean"):
        xp = array_module(logits)
        if logits.ndim != 2 or target.shape != logits.shape[:1]:
            raise ValueError(f"cross_entropy expects logits (N, C) and targets (N,), got "
                             f"{logits.shape} and {target.shape}")
        if target.dtype.kind not in "iu":
            raise TypeError(f"cross_entropy targets must be integer class indices, got {target.dtype}")
        _check_not_empty("cross_entropy", logits.shape[0], reduction)
        classes = logits.shape[1]
        if target.size and xp is np:
            # NumPy would take -1 as the last class and give a raw IndexError past the end. On a
            # device this check would be two host syncs per call; there (as PyTorch's device
            # assert does not raise on the host either) such a row's loss is NaN instead.
            lo, hi = int(target.min()), int(target.max())
            if lo < 0 or hi >= classes:
                bad = lo if lo < 0 else hi
                raise IndexError(f"cross_entropy: target {bad} is out of bounds for {classes} classes "
                                 f"(targets must be in [0, {classes - 1}])")
        # One exp over the logits: p = exp(z) / sum(exp(z)) and loss = log(sum) - z[target],
        # with z = logits - max (so exp never overflows). z becomes p in its own buffer, counted
        # as workspace until it is saved: exp(z) into a second buffer made z an uncounted
        # 4·N·C bytes alive beside p (the ledger read 0.874 of the pool's peak on an MLP with
        # 512 classes at batch 4096).
        valid = None if xp is np else (target >= 0) & (target < classes)
        gathered = target if valid is None else xp.clip(target, 0, classes - 1)  # then NaN where invalid
        p = memory.register(logits - logits.max(axis=1, keepdims=True))
        picked = p[xp.arange(len(target)), gathered]
        xp.exp(p, out=p)
        total = p.sum(axis=1, keepdims=True)
        losses = xp.log(total[:, 0]) - picked
        if valid is not None:
            losses = xp.where(valid, losses, losses.dtype.type(np.nan))
        p /= total
        ctx.reduction = reduction
        ctx.save_for_backward(p, target)
        return _reduce(losses, reduction)

    def backward(ctx, g):
        p, target = ctx.saved_tensors
        xp = array_module(p)
        grad = p.copy()
        if xp is np:
            grad[xp.arange(len(target)), target] -= 1
        else:  # a row whose target was out of range has a NaN loss: its gradient is NaN too,
            # not the pull towards the clipped class (which a GradScaler would not have skipped)
            classes = p.shape[1]
            grad[xp.arange(len(target)), xp.clip(target, 0, classes - 1)] -= 1
            grad += xp.where((target >= 0) & (target < classes), p.dtype.type(0), p.dtype.type(np.nan))[:, None]
        if ctx.reduction == "mean":
            grad *= g / len(target)
        elif ctx.reduction == "sum":
            grad *= g
        else:
            grad *= g[:, None]
        return grad, None


class MSELoss(Function):
    def forward(ctx, a, b, reduction="mean"):
        if a.shape != b.shape:
            raise ValueError(f"mse_loss: input shape {a.shape} and target shape {b.shape} differ")
        _check_not_empty("mse_loss", a.size, reduction)
        d = a - b
        ctx.reduction = reduction
        ctx.save_for_backward(d)
        return _reduce(memory.register(d * d), reduction)  # the squares: workspace unless returned

    def backward(ctx, g):
        (d,) = ctx.saved_tensors
        scale = 2.0 / d.size if ctx.reduction == "mean" else 2.0
        grad = d * (g * scale)
        return (grad if ctx.needs_input_grad[0] else None), (-grad if ctx.needs_input_grad[1] else None)


class HuberLoss(Function):
    """Huber loss of d = input - target: d²/2 where |d| <= delta, delta·(|d| - delta/2) beyond.

    Quadratic near zero, linear in the tails, so one large TD error in reinforcement learning
    cannot produce a huge gradient: the gradient is d clipped to [-delta, delta]. Saves the
    difference (4·N bytes in float32), like ``mse_loss``.
    """

    def forward(ctx, a, b, reduction="mean", delta=1.0):
        xp = array_module(a)
        if a.shape != b.shape:
            raise ValueError(f"huber_loss: input shape {a.shape} and target shape {b.shape} differ")
        if not delta > 0:
            raise ValueError(f"huber_loss: delta must be positive, got {delta}")
        d = memory.register(a - b)  # saved for backward: counted from now, not from the return
        if d.dtype.kind not in "fc":  # integers: the losses (halves, deltas) are floats
            d = memory.register(d.astype(np.float64))
        # The same operations as where(|d| <= delta, 0.5 d d, delta (|d| - delta/2)), in three
        # counted buffers (the written-out form kept six uncounted ones): the linear branch is
        # made in |d|'s buffer and the quadratic one copied over it where it applies.
        losses = memory.register(xp.abs(d))
        inside = memory.register(losses <= delta)
        quadratic = memory.register(xp.multiply(d, 0.5, out=xp.empty_like(d)))
        quadratic *= d
        losses -= 0.5 * delta
        losses *= delta
        xp.copyto(losses, quadratic, where=inside)
        del inside, quadratic
        ctx.reduction, ctx.delta = reduction, delta
        ctx.save_for_backward(d)
        return _reduce(losses, reduction)

    def backward(ctx, g):
        (d,) = ctx.saved_tensors
        xp = array_module(d)
        scale = 1.0 / d.size if ctx.reduction == "mean" else 1.0
        grad = xp.clip(d, -ctx.delta, ctx.delta)
        grad *= g * scale if scale != 1.0 else g  # in place: no product beside the clipped d
        return (grad if ctx.needs_input_grad[0] else None), (-grad if ctx.needs_input_grad[1] else None)
