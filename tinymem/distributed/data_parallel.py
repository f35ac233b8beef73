"""Data parallel training: every rank holds the whole model and a slice of the batch.

Each of N ranks runs forward and backward on its B/N samples, then the gradients are summed
with an all-reduce and divided by N: every rank ends up with the gradient of the mean loss over
the full batch of B, takes the same optimizer step, and the replicas stay identical. After T
steps the parameters equal single-process training on the full batch (up to the order of the
floating-point sums).

Memory per rank (float32 Adam, P parameters): parameters 4P, gradients 4P, optimizer state 8P,
16P bytes of model state, the same on every rank: data parallel divides the *activations* by N
(each rank sees B/N samples), never the model state. ZeRO (:mod:`.zero`) attacks that.

Traffic per step and rank: one ring all-reduce of the gradients, 2(N-1)/N·4P bytes sent (and
as many received).

Pitfalls: the batch must split evenly (B divisible by N), or the mean of the local means is not
the full batch's mean; the replicas must start equal (the parameters are broadcast from rank 0
at construction); layers with per-batch statistics (BatchNorm) see only B/N samples.
"""
from .. import memory
from .units import Strategy, batch_array, forward_backward, split_units


def broadcast_parameters(params, comm, root=0):
    """Make every rank's parameters equal to ``root``'s (in place)."""
    for p in params:
        comm.broadcast(p.data, root)


def local_batch(array, comm):
    """This rank's contiguous 1/N slice of a batch (the first axis must split evenly)."""
    data = batch_array(array)
    n = data.shape[0]
    if n % comm.size:
        raise ValueError(f"a batch of {n} samples does not split evenly over {comm.size} ranks; "
                         f"use a batch size divisible by the world size")
    per = n // comm.size
    return data[comm.rank * per:(comm.rank + 1) * per]


class DataParallel(Strategy):
    """``DataParallel(model, lambda params: Adam(params, lr=1e-3), comm)``; ``step(x, y, loss_fn)``.

    ``x`` and ``y`` are the *global* batch (every rank passes the same arrays) or, with
    ``local=True`` in :meth:`step`, this rank's slice already. ``model`` must be a Sequential.
    """

    def __init__(self, model, optimizer, comm):
        self.model, self.comm = model, comm
        self.units = split_units(model)
        broadcast_parameters(model.parameters(), comm)
        self.optimizer = optimizer(model.parameters())
        self.state_at_backward_end = None

    def step(self, x, y, loss_fn, local=False):
        """One training step; returns this rank's loss on its slice of the batch."""
        self.optimizer.zero_grad()
        if not local:
            x, y = local_batch(x, self.comm), local_batch(y, self.comm)
        loss = forward_backward(self.units, x, y, loss_fn, self)
        self.state_at_backward_end = memory.LEDGER.by_bucket()
        memory.mark("communicate")
        self.reduce_gradients()
        self.optimizer.step()
        self.after_optimizer_step()
        return loss

    def reduce_gradients(self):
        """Replace every gradient by its mean over the ranks (all-reduce, then divide by N)."""
        for p in self.model.parameters():
            if p.grad is not None:
                g = p.grad.data
                self.comm.all_reduce(g)
                g /= self.comm.size

    def after_optimizer_step(self):
        """Nothing to do: every replica took the same step."""
