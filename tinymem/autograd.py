"""Function and the backward pass: the graph engine.

The graph, PyTorch style: a Tensor made by an op points to its creator node (a
:class:`Function` instance, which doubles as the ``ctx``); a node points to the nodes that made
its inputs (or to leaf tensors that want a gradient). Nothing points back from a node to its
outputs, so a finished graph is freed by reference counting alone, with no cycle for the garbage
collector to find.

Functions compute on raw arrays (NumPy or CuPy) and return raw arrays; ``Function.apply`` wraps
the results into Tensors (``tinymem/tensor.py``) and records the node when a gradient is needed.

Everything a backward needs is kept through :meth:`Function.save_for_backward`, which is where
:class:`saved_tensors_hooks` plugs in (pack at save time, unpack at use time): the seam that
half-precision storage, int8 compression and offload use. The ledger counts saved arrays in the
``activation`` bucket until backward has used them. The modes and hooks themselves live in
``tinymem/grad_mode.py``; this module re-exports them.

Backward is iterative (Kahn's algorithm over dependency counts), so a chain of thousands of
nodes needs no recursion; each node's saved arrays and incoming gradients are dropped as soon as
its backward has run.
"""
import numpy as np

from . import backend, memory
from .grad_mode import (_state, current_saved_tensors_hooks, enable_grad, forward_context,  # noqa: F401
                        forward_contexts, is_grad_enabled, is_recomputing, no_grad, recomputing,
                        saved_as_is, saved_tensors_hooks, set_grad_enabled)


def _storage(obj):
    """The array inside a packed object that should count as an activation, if any."""
    if isinstance(obj, Tensor):
        return obj.data
    if hasattr(obj, "nbytes") and hasattr(obj, "dtype"):
        return obj
    return None


class Function:
    """An op: subclass it and write ``forward(ctx, *arrays)`` and ``backward(ctx, *grads)``.

    Both may be plain methods (``self`` is the ctx) or static methods taking ``ctx``. ``forward``
    receives arrays (and any non-tensor arguments) and returns an array or a tuple of arrays;
    ``backward`` receives one gradient array per output and returns one gradient (or ``None``)
    per positional input. Gradients of broadcast inputs are summed back to the input's shape by
    the engine, so ops need not do it.
    """

    def __init__(self):
        self.parents = ()
        self.needs_input_grad = ()
        self._saved = None
        self._recording = False
        self._released = False

    # -- saving ---------------------------------------------------------------------------
    def save_for_backward(self, *arrays):
        """Keep arrays for backward. Memory: their bytes stay in ``activation`` until used."""
        if not self._recording:
            return
        hooks = _state.hooks
        if hooks and hooks[-1] is not None:
            pack, unpack = hooks[-1]
            saved = []
            for a in arrays:
                if a is None:
                    saved.append(None)
                    continue
                packed = pack(Tensor._wrap(a))
                storage = _storage(packed)
                if storage is not None:
                    memory.hold(storage)
                saved.append((unpack, packed, storage))
            self._saved = (True, saved)
        else:
            for a in arrays:
                if a is not None:
                    memory.hold(a)
            self._saved = (False, arrays)

    @property
    def saved_tensors(self):
        """The saved arrays, unpacked (a tuple)."""
        if self._released:
            raise RuntimeError(
                "trying to backward through the graph a second time (its saved tensors were "
                "freed); pass retain_graph=True to the first backward() if you need this")
        if self._saved is None:
            return ()
        hooked, items = self._saved
        if not hooked:
            return items
        out = []
        for item in items:
            if item is None:
                out.append(None)
                continue
            unpack, packed, _ = item
            value = unpack(packed)
            out.append(value.data if isinstance(value, Tensor) else value)
        return tuple(out)

    def release_saved(self):
        """Drop the saved arrays (called by backward as soon as this node is done)."""
        if self._saved is not None:
            hooked, items = self._saved
            for item in items:
                if item is None:
                    continue
                storage = item[2] if hooked else item
                if storage is not None:
                    memory.unhold(storage)
            self._saved = None
        self._released = True

    def __del__(self):
        # A graph dropped without backward (evaluation with grad on) still gives its bytes back.
        if self._saved is not None:
            self.release_saved()

    # -- running --------------------------------------------------------------------------
    @classmethod
    def apply(cls, *inputs, **kwargs):
        """Run the op on Tensors (and constants), recording the graph when a gradient is needed."""
        device = None
        arrays = []
        needs = []
        for x in inputs:
            if isinstance(x, Tensor):
                if device is None:
                    device = x.device
                elif x.device != device:
                    raise backend.DeviceError(
                        f"{cls.__name__}: tensors on different devices ({device} and {x.device}); "
                        f"move them with .to('{device}') first")
                arrays.append(x.data)
                needs.append(x.requires_grad)
            else:
                arrays.append(x)
                needs.append(False)
        ctx = cls()
        record = _state.grad_enabled and any(needs)
        ctx._recording = record
        ctx.needs_input_grad = tuple(needs)
        out = cls.forward(ctx, *arrays, **kwargs)
        multi = isinstance(out, tuple)
        # NumPy turns 0-d results into scalars; a Tensor always holds an array.
        outs = tuple(np.asarray(o) if isinstance(o, np.generic) else o for o in (out if multi else (out,)))
        tensors = tuple(Tensor._wrap(o, requires_grad=record, ctx=ctx if record else None, index=i)
                        for i, o in enumerate(outs))
        if record:
            ctx.parents = tuple(
                (x._ctx, x._index) if isinstance(x, Tensor) and x._ctx is not None
                else (x if isinstance(x, Tensor) and x.requires_grad else None)
                for x in inputs)
            ctx.input_meta = tuple((x.shape, x.dtype) if isinstance(x, Tensor) else None for x in inputs)
            ctx.output_meta = tuple((o.shape, o.dtype) for o in outs)
        return tensors if multi else tensors[0]

    def forward(ctx, *args, **kwargs):
        raise NotImplementedError(f"{type(ctx).__name__} must define forward")

    def backward(ctx, *grads):
        raise NotImplementedError(f"{type(ctx).__name__} has no backward")


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


def _accumulate_leaf(leaf, g, claimed):
    if g.dtype != leaf.dtype:
        g = g.astype(leaf.dtype)
    elif id(memory._root(g)) in claimed:
        # An add passes one array to both inputs; each .grad must own its buffer, because
        # unscale_ or clipping later edit gradients in place.
        g = g.copy()
    if leaf.grad is None:
        claimed.add(id(memory._root(g)))
        leaf.grad = Tensor._wrap(g, bucket="gradient")
    else:
        # Out of place: ``g`` may still be shared with another node's pending gradient.
        leaf.grad.data = leaf.grad.data + g


def run_backward(roots, grads, retain_graph=False):
    """Backpropagate ``grads`` (arrays) from the Tensors ``roots`` through their graph."""
    memory.mark("backward")
    pending = {}
    start = []
    claimed = {id(memory._root(g)) for g in grads}
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
        slot[root._index] = g if slot[root._index] is None else slot[root._index] + g

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
        slot = pending.pop(node)
        if any(g is None for g in slot):  # an output nobody used: its gradient is zero
            xp = backend.array_module(next(g for g in slot if g is not None))
            slot = [xp.zeros(*node.output_meta[i]) if g is None else g for i, g in enumerate(slot)]
        if node._released:
            node.saved_tensors  # raises the "second time" error
        in_grads = type(node).backward(node, *slot)
        del slot
        if not isinstance(in_grads, tuple):
            in_grads = (in_grads,)
        if len(in_grads) < len(node.parents):
            # Trailing non-tensor arguments (a shape, an axis) need no gradient slot.
            if any(p is not None for p in node.parents[len(in_grads):]):
                raise RuntimeError(f"{type(node).__name__}.backward returned {len(in_grads)} "
                                   f"gradients for {len(node.parents)} inputs")
            in_grads = in_grads + (None,) * (len(node.parents) - len(in_grads))
        parents, meta = node.parents, node.input_meta
        if not retain_graph:
            node.release_saved()
            node.parents = ()
        for parent, g, m in zip(parents, in_grads, meta):
            if parent is None or g is None:
                continue
            g = sum_to(g, m[0])
            if isinstance(g, np.generic):
                g = np.asarray(g)
            if type(parent) is tuple:
                pnode, index = parent
                memory.register(g)
                if pnode not in pending:
                    pending[pnode] = [None] * len(pnode.output_meta)
                pslot = pending[pnode]
                pslot[index] = g if pslot[index] is None else pslot[index] + g
                deps[pnode] -= 1
                if deps[pnode] == 0:
                    ready.append(pnode)
            else:
                _accumulate_leaf(parent, g, claimed)


# Tensor needs run_backward and Function needs Tensor: the import comes last, once both exist.
from .tensor import Tensor, backward, tensor  # noqa: E402,F401
