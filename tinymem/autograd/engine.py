"""The backward pass: gradients flow from the outputs to the leaves, iteratively.

Kahn's algorithm over dependency counts, so a chain of thousands of nodes needs no recursion.
Each node's saved arrays and incoming gradients are dropped as soon as its backward has run
(unless ``retain_graph``), which is why activation memory falls during backward.
"""
import numpy as np

from .. import backend, memory
from ..memory import attribution


def sum_to(grad, shape):
    """Sum ``grad`` over the axes that broadcasting added or stretched, to get ``shape``."""
    if grad.shape == shape:
        return grad
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(
        i + extra for i, n in enumerate(shape) if n == 1 and grad.shape[i + extra] != 1)
    out = grad.sum(axis=axes, keepdims=True) if axes else grad
    if extra:
        out = out.reshape(out.shape[extra:]) if out.ndim > len(shape) else out
    return out.reshape(shape)


def _borrowed(g):
    """Whether ``g`` cannot serve as a ``.grad`` that is edited in place: a broadcast view (a
    stride of 0 over a dimension longer than 1, as sum's and mean's backward return: writing
    one element would write them all, and NumPy marks it read-only) or any read-only array."""
    strides = getattr(g, "strides", None)
    if strides is None:  # a row-sparse gradient (tinymem.sparse) owns its arrays
        return False
    return (any(s == 0 and n > 1 for s, n in zip(strides, g.shape))
            or not getattr(g.flags, "writeable", True))  # CuPy's flags have no writeable


def _accumulate_leaf(leaf, g, claimed):
    if leaf.dtype.kind not in "fc":
        # requires_grad set by assignment on an integer tensor: the gradient would be truncated.
        raise TypeError(f"a leaf of dtype {leaf.dtype} requires grad: only floating-point tensors "
                        "can; convert it first, e.g. t.float().requires_grad_()")
    if g.dtype != leaf.dtype:
        g = g.astype(leaf.dtype)
    elif leaf.grad is None and (id(memory.owner_of(g)) in claimed or _borrowed(g)):
        # An add passes one array to both inputs, and sum's backward a broadcast view; each
        # .grad must own its buffer, because unscale_ or clipping later edit gradients in place.
        # (Added to an existing .grad, ``g`` is only read.)
        g = g.copy()
    if leaf.grad is None:
        claimed.add(id(memory.owner_of(g)))
        leaf.grad = g  # the setter wraps the array as a Tensor in the gradient bucket
        return
    grad = leaf.grad.data
    if _accumulates_in_place(grad, g, claimed):
        grad += g  # the same sum, bit for bit, as ``grad + g``, without a second gradient buffer
    else:
        leaf.grad.data = grad + g


def _accumulates_in_place(grad, g, claimed):
    """Whether ``.grad`` may take ``g`` in place, as PyTorch accumulates: yes for a buffer that
    only this gradient holds and whose dtype the sum keeps. No for a buffer made this backward
    (``claimed``: an add's backward hands one array to both inputs, so it may still be another
    node's pending gradient), a broadcast or read-only one, a row-sparse one, or a sum that
    promotes (a float16 ``.grad`` plus a float32 ``g``).

    Out of place, the sum is a second buffer of the gradient's size while the old one lives; in
    a window opened after the previous step it is also all that ``tracemalloc`` sees, since the
    old buffer's free predates the window: it measured 23% above the ledger on an MLP step."""
    if not (hasattr(grad, "strides") and hasattr(g, "strides")):  # a row-sparse one adds its own way
        return False
    if id(memory.owner_of(grad)) in claimed or _borrowed(grad):
        return False
    return backend.array_module(grad).result_type(grad, g) == grad.dtype


def run_backward(roots, grads, retain_graph=False):
    """Backpropagate ``grads`` (arrays) from the Tensors ``roots`` through their graph."""
    outer = attribution.enter_backward(None)  # each node's arrays are stamped with its module
    try:
        _backward(roots, grads, retain_graph)
    finally:
        attribution.leave_backward(outer)


def _backward(roots, grads, retain_graph):
    memory.mark("backward")
    pending = {}
    start = []
    claimed = {id(memory.owner_of(g)) for g in grads}
    for root, g in zip(roots, grads):
        if root._ctx is None:
            if root.requires_grad:
                _accumulate_leaf(root, g, claimed)
            continue
        node = root._ctx
        if node not in pending:
            pending[node] = [None] * len(node.output_meta)
            start.append(node)
        slot = pending[node]
        slot[root._index] = g if slot[root._index] is None else memory.register(slot[root._index] + g)

    # Count, for every node, how many consumers will send it a gradient.
    deps = {}
    stack = list(start)
    seen = set(start)
    while stack:
        node = stack.pop()
        for parent in node.parents:
            if type(parent) is tuple:
                pnode = parent[0]
                deps[pnode] = deps.get(pnode, 0) + 1
                if pnode not in seen:
                    seen.add(pnode)
                    stack.append(pnode)

    ready = [n for n in start if deps.get(n, 0) == 0]
    while ready:
        node = ready.pop()
        attribution.enter_backward(node)
        slot = pending.pop(node)
        if any(g is None for g in slot):  # an output nobody used: its gradient is zero
            xp = backend.array_module(next(g for g in slot if g is not None))
            slot = [memory.register(xp.zeros(*node.output_meta[i])) if g is None else g
                    for i, g in enumerate(slot)]
        if node._released:
            node.saved_tensors  # raises the "second time" error
        in_grads = type(node).backward(node, *slot)
        if not isinstance(in_grads, tuple):
            in_grads = (in_grads,)
        # Counted now, while the incoming gradients and the saved tensors are still alive: that
        # moment, not a later one, is the step's peak when a backward makes big arrays.
        for g in in_grads:
            if g is not None and not isinstance(g, np.generic):
                memory.register(g)
        del slot
        if len(in_grads) < len(node.parents):
            # Trailing non-tensor arguments (a shape, an axis) need no gradient slot.
            if any(p is not None for p in node.parents[len(in_grads):]):
                raise RuntimeError(f"{type(node).__name__}.backward returned {len(in_grads)} "
                                   f"gradients for {len(node.parents)} inputs")
            in_grads = in_grads + (None,) * (len(node.parents) - len(in_grads))
        parents = node.parents
        if not retain_graph:
            node.release_saved()
            node.parents = ()
        for parent, returned in zip(parents, in_grads):
            if parent is None or returned is None:
                continue
            if type(parent) is tuple:
                pnode, index = parent
                g = sum_to(returned, pnode.output_meta[index][0])  # the shape this input had
            else:
                g = sum_to(returned, parent.shape)
            if isinstance(g, np.generic):
                g = np.asarray(g)
            if type(parent) is tuple:
                if g is not returned:  # reduced (or a scalar made 0-d): new; ``returned`` is counted
                    memory.register(g)
                if pnode not in pending:
                    pending[pnode] = [None] * len(pnode.output_meta)
                pslot = pending[pnode]
                # A tensor used twice gets the sum of its consumers' gradients: a new array.
                pslot[index] = g if pslot[index] is None else memory.register(pslot[index] + g)
                deps[pnode] -= 1
                if deps[pnode] == 0:
                    ready.append(pnode)
            else:
                _accumulate_leaf(parent, g, claimed)
        # Handed on or added into ``.grad``: without this the tuple would hold them through the
        # next node's backward (a weight's whole gradient, when it was added in place).
        in_grads = returned = g = None
