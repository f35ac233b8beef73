"""01.3, the recomputation runs with whatever RNG state backward finds: other dropout masks."""
import tinymem as tm
from tinymem import autograd


class _CheckpointOne(tm.Function):
    def forward(ctx, x, function=None):
        ctx.function = function
        ctx.save_for_backward(x)
        with tm.no_grad():
            return function(tm.Tensor(x)).data

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        leaf = tm.Tensor(x, requires_grad=True)
        with autograd.recomputing(), tm.enable_grad():
            out = ctx.function(leaf)
        out.backward(g)
        return leaf.grad.data


def checkpoint_one(function, x):
    return _CheckpointOne.apply(x, function=function)
