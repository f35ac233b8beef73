"""Softmax, log-softmax and the losses, fused so that each saves only what its backward needs.

Memory of each (B rows, C classes, float32 = 4 bytes):
- ``softmax``: saves its output (4·B·C).  ``log_softmax``: saves softmax(x) (4·B·C).
- ``cross_entropy``: saves the probabilities (4·B·C) and the targets (8·B).
- ``mse_loss``: saves the difference (4·N).
"""
from ..autograd import Function
from ..backend import array_module


class Softmax(Function):
    def forward(ctx, x, axis=-1):
        xp = array_module(x)
        e = xp.exp(x - x.max(axis=axis, keepdims=True))
        y = e / e.sum(axis=axis, keepdims=True)
        ctx.axis = axis
        ctx.save_for_backward(y)
        return y

    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(axis=ctx.axis, keepdims=True))


class LogSoftmax(Function):
    def forward(ctx, x, axis=-1):
        xp = array_module(x)
        shifted = x - x.max(axis=axis, keepdims=True)
        lse = xp.log(xp.exp(shifted).sum(axis=axis, keepdims=True))
        y = shifted - lse
        ctx.axis = axis
        ctx.save_for_backward(xp.exp(y))
        return y

    def backward(ctx, g):
        (p,) = ctx.saved_tensors
        return g - p * g.sum(axis=ctx.axis, keepdims=True)


class CrossEntropy(Function):
    """Cross-entropy of logits (N, C) against integer targets (N,), numerically stable."""

    def forward(ctx, logits, target, reduction="mean"):
        xp = array_module(logits)
        if logits.ndim != 2 or target.shape != logits.shape[:1]:
            raise ValueError(f"cross_entropy expects logits (N, C) and targets (N,), got "
                             f"{logits.shape} and {target.shape}")
        if target.dtype.kind not in "iu":
            raise TypeError(f"cross_entropy targets must be integer class indices, got {target.dtype}")
        # One exp over the logits: p = exp(z) / sum(exp(z)) and loss = log(sum) - z[target],
        # with z = logits - max (so exp never overflows).
        shifted = logits - logits.max(axis=1, keepdims=True)
        p = xp.exp(shifted)
        total = p.sum(axis=1, keepdims=True)
        losses = xp.log(total[:, 0]) - shifted[xp.arange(len(target)), target]
        del shifted
        p /= total
        ctx.reduction = reduction
        ctx.save_for_backward(p, target)
        if reduction == "mean":
            return losses.mean()
        if reduction == "sum":
            return losses.sum()
        if reduction == "none":
            return losses
        raise ValueError(f"unknown reduction {reduction!r}; choose 'mean', 'sum' or 'none'")

    def backward(ctx, g):
        p, target = ctx.saved_tensors
        xp = array_module(p)
        grad = p.copy()
        grad[xp.arange(len(target)), target] -= 1
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
        d = a - b
        ctx.reduction = reduction
        ctx.save_for_backward(d)
        if reduction == "mean":
            return (d * d).mean()
        if reduction == "sum":
            return (d * d).sum()
        if reduction == "none":
            return d * d
        raise ValueError(f"unknown reduction {reduction!r}; choose 'mean', 'sum' or 'none'")

    def backward(ctx, g):
        (d,) = ctx.saved_tensors
        scale = 2.0 / d.size if ctx.reduction == "mean" else 2.0
        grad = d * (g * scale)
        return (grad if ctx.needs_input_grad[0] else None), (-grad if ctx.needs_input_grad[1] else None)
