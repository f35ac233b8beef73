"""Batch normalisation over (B, C, H, W): per channel, statistics over batch and pixels.

Training: y = (x - mean) / sqrt(var + eps) · weight + bias with the batch's mean and biased
variance over (B, H, W). The running statistics move towards the batch's as PyTorch does:
``running = (1 - momentum) · running + momentum · batch``, with the *unbiased* variance
(n / (n - 1) times the biased one, n = B·H·W).

Evaluation: the running statistics replace the batch's, so y is an affine map of x.

Checkpointing pitfall: a checkpointed block runs its forward twice (once plainly, once inside
backward). The running statistics must move once per real step, so the update is skipped while
``tinymem.autograd.is_recomputing()`` is True. The recomputed output is still bit-identical:
it uses the same batch statistics, which do not depend on the running ones.

Memory saved for backward: the normalised input x-hat (B·C·H·W elements) and 1/std (C), plus
the weight (a parameter). In evaluation only 1/std and the weight are needed.
"""
from .. import autograd, memory
from ..autograd import Function
from ..backend import array_module
from .layers import scale_shift

_AXES = (0, 2, 3)


def _channel(v):
    return v.reshape(1, -1, 1, 1)


class BatchNorm2d(Function):
    def forward(ctx, x, weight=None, bias=None, running_mean=None, running_var=None,
                training=True, momentum=0.1, eps=1e-5):
        xp = array_module(x)
        if x.ndim != 4:
            raise ValueError(f"batch_norm2d: expected input of shape (B, C, H, W), got {x.shape}")
        if x.dtype.kind != "f" or not eps > 0:
            raise ValueError(f"batch_norm2d: needs a floating input and eps > 0, got {x.dtype} and eps={eps}")
        for what, v in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
            if v is not None and v.shape != (x.shape[1],):  # else one value would broadcast to every channel
                raise ValueError(f"batch_norm2d: {what} of shape {v.shape} for {x.shape[1]} channels; "
                                 f"it must be ({x.shape[1]},)")
        ctx.training = training
        if training:
            n = x.size // x.shape[1]
            if n < 2:
                raise ValueError(f"batch_norm2d: training needs more than one value per channel, "
                                 f"got input of shape {x.shape}")
            mean = x.mean(axis=_AXES)
            # Two arrays of x's size, counted as workspace while they are temporaries (the plain
            # formulas make five): the centred values, made x-hat in place below, and their
            # squares, whose buffer then holds the output. Same operations, same order.
            xhat = memory.register(x - _channel(mean))
            squares = memory.register(xhat * xhat)
            var = squares.mean(axis=_AXES)
            if running_mean is not None and not autograd.is_recomputing():
                running_mean *= 1 - momentum
                running_mean += momentum * mean.astype(running_mean.dtype)
                running_var *= 1 - momentum
                running_var += momentum * (var * (n / (n - 1))).astype(running_var.dtype)
        else:
            if running_mean is None:
                raise ValueError("batch_norm2d: evaluation needs running statistics")
            mean, var = running_mean.astype(x.dtype), running_var.astype(x.dtype)
            xhat = memory.register(x - _channel(mean))
            squares = None
        rstd = (1.0 / xp.sqrt(var + eps)).astype(x.dtype)
        xhat *= _channel(rstd)
        gw = len(ctx.needs_input_grad) > 1 and ctx.needs_input_grad[1]
        ctx.save_for_backward(xhat if training or gw else None, rstd, weight)
        if weight is None and bias is None:
            return xhat
        out = squares if squares is not None else memory.register(xp.empty_like(xhat))
        return scale_shift(xp, xhat, None if weight is None else _channel(weight),
                           None if bias is None else _channel(bias), out)

    def backward(ctx, g):
        """Training: gx = rstd·(ĝ - mean(ĝ) - x̂·mean(ĝ·x̂)) with ĝ = g·weight, means per channel.
        Workspace: ĝ and one product buffer of x's size beside the gradient returned (the plain
        formulas make four more); with mixed dtypes the formulas as written."""
        xhat, rstd, weight = ctx.saved_tensors
        needs = ctx.needs_input_grad
        want_gw = weight is not None and needs[1]
        gb = g.sum(axis=_AXES) if len(needs) > 2 and needs[2] else None
        same = xhat is not None and g.dtype == xhat.dtype == rstd.dtype and (weight is None or weight.dtype == g.dtype)
        if not (ctx.training and same):
            gw = (g * xhat).sum(axis=_AXES) if want_gw else None
            gxhat = g * _channel(weight) if weight is not None else g
            if ctx.training:
                gx = _channel(rstd) * (gxhat - _channel(gxhat.mean(axis=_AXES))
                                       - xhat * _channel((gxhat * xhat).mean(axis=_AXES)))
            else:
                gx = gxhat * _channel(rstd)
            return gx, gw, gb
        xp = array_module(g)
        work = memory.register(g * xhat)  # g·x̂ for gw, then ĝ·x̂, then x̂·mean(ĝ·x̂)
        gw = work.sum(axis=_AXES) if want_gw else None
        gxhat = memory.register(g * _channel(weight)) if weight is not None else g
        xp.multiply(gxhat, xhat, out=work)
        xp.multiply(xhat, _channel(work.mean(axis=_AXES)), out=work)
        gx = memory.register(gxhat - _channel(gxhat.mean(axis=_AXES)))  # the gradient returned
        gx -= work
        gx *= _channel(rstd)
        return gx, gw, gb
