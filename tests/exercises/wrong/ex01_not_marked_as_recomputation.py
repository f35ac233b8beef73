"""01.3, the recomputation not marked (no autograd.recomputing()): BatchNorm would update twice."""
import tinymem as tm


class _CheckpointOne(tm.Function):
    def forward(ctx, x, function=None):
        ctx.function, ctx.rng = function, tm.get_rng_state()
        ctx.save_for_backward(x)
        with tm.no_grad():
            return function(tm.Tensor(x)).data

    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        outer = tm.get_rng_state()
        tm.set_rng_state(ctx.rng)
        leaf = tm.Tensor(x, requires_grad=True)
        with tm.enable_grad():
            out = ctx.function(leaf)
        tm.set_rng_state(outer)
        out.backward(g)
        return leaf.grad.data


def checkpoint_one(function, x):
    return _CheckpointOne.apply(x, function=function)
