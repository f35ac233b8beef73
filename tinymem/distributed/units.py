"""Running a Sequential model unit by unit, with a separate graph per unit.

Data parallel, ZeRO and the pipeline all need to act *between* layers: gather a layer's
parameters just before its forward, reduce its gradients just after its backward. The
engine's backward walks one graph in whatever order its dependencies allow, so instead each
unit (each child of the Sequential) gets a graph of its own, started at :func:`unit_input`:
a node that passes the previous unit's output through in forward and, in backward, catches
the gradient arriving for it. Backward then runs unit by unit, last to first, and the
gradient of each unit's input is handed to the previous one by hand (or, in the pipeline,
sent to the previous rank).

The numbers are the same as one graph's: the same ops run on the same arrays; only the order
in which independent gradient sums finish may differ.

Memory cost: the same as the single graph (the boundary node saves nothing); the gradient
caught at each boundary is the one the single graph would pass on.
"""
import contextlib

from .. import backend, memory
from ..autograd import Function, Tensor


class _UnitInput(Function):
    """Identity in forward; backward appends the incoming gradient to ``box``."""

    def forward(ctx, anchor, array, box):
        ctx.box = box
        return array

    def backward(ctx, grad):
        ctx.box.append(grad)
        return (None,)


def unit_input(array, box):
    """A Tensor that starts a new graph at ``array``; its gradient lands in the list ``box``."""
    xp = backend.array_module(array)
    anchor = Tensor(xp.zeros((), array.dtype), requires_grad=True)
    return _UnitInput.apply(anchor, array, box)


def split_units(model):
    """The children of a Sequential model (its units); a module without children is one unit.

    Any other module is refused: the strategies run units one after another, so the model's own
    ``forward`` (a residual sum, say) would be skipped and the loss silently differ.
    """
    from ..nn import Module, Sequential

    if not isinstance(model, Module):
        raise TypeError(f"the model must be a tinymem Module (a Sequential), got {type(model).__name__}")
    children = model.children()
    if children and not isinstance(model, Sequential):
        raise TypeError(f"{type(model).__name__} has its own forward: partitioning runs a Sequential's "
                        "units one after another; write the model as an nn.Sequential of blocks")
    return children if children else [model]


class Strategy:
    """The hooks a partitioning strategy puts between units; the defaults do nothing."""

    def before_forward(self, i):
        pass

    def saving(self, i):
        """A context around unit ``i``'s forward (ZeRO-3 installs saved-tensor hooks here)."""
        return contextlib.nullcontext()

    def after_forward(self, i):
        pass

    def before_backward(self, i):
        pass

    def after_backward(self, i):
        pass


def model_device(units):
    """The device of the units' parameters (``None`` when they have none)."""
    return next((p.device for unit in units for p in unit.parameters()), None)


def batch_array(batch):
    """A batch (an array, a Tensor or a list) as an array: a list becomes one on the host, as
    ``tm.tensor(batch, device="cpu")`` makes it (Python floats float32, ints int64)."""
    if isinstance(batch, Tensor):
        return batch.data
    if isinstance(batch, (list, tuple)):
        return Tensor(batch, device="cpu").data
    return batch


def batch_on(batch, device):
    """A batch (an array, a Tensor or a list) as an array on the model's ``device``: every rank
    loads the global batch where it likes (the host, most often), as ``model(tm.tensor(x))``
    moves it in one process. Memory: one copy of this rank's slice when it moves."""
    data = batch_array(batch)
    return data if device is None or not hasattr(data, "shape") else backend.to_device(data, device)


def forward_backward(units, x, y, loss_fn, strategy):
    """One forward and backward of ``units`` on ``(x, y)``, unit by unit; returns the loss (float).

    ``strategy``'s hooks run around every unit. When this returns, every parameter that took
    part holds its gradient (or the strategy has already moved it elsewhere).
    """
    memory.mark("forward")
    outputs, boxes = [], []
    device = model_device(units)
    h, y = batch_on(x, device), batch_on(y, device)
    for i, unit in enumerate(units):
        strategy.before_forward(i)
        box = []
        inp = Tensor.wrap(h) if i == 0 else unit_input(h, box)
        with strategy.saving(i):
            out = unit(inp)
        strategy.after_forward(i)
        outputs.append(out)
        boxes.append(box)
        h = out.data
    head = []
    loss = loss_fn(unit_input(h, head), y)
    loss.backward()
    grad = head[0]
    for i in reversed(range(len(units))):
        strategy.before_backward(i)
        if outputs[i].requires_grad:
            outputs[i].backward(grad)
        outputs[i] = None
        grad = boxes[i][0] if boxes[i] else None
        strategy.after_backward(i)
    return float(loss.item())
