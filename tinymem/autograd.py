"""Tensor, Function and the backward pass.

The graph, PyTorch style: a Tensor made by an op points to its creator node (a
:class:`Function` instance, which doubles as the ``ctx``); a node points to the nodes that made
its inputs (or to leaf tensors that want a gradient). Nothing points back from a node to its
outputs, so a finished graph is freed by reference counting alone, with no cycle for the garbage
collector to find.

Functions compute on raw arrays (NumPy or CuPy) and return raw arrays; ``Function.apply`` wraps
the results into Tensors and records the node when a gradient is needed.

Everything a backward needs is kept through :meth:`Function.save_for_backward`, which is where
:class:`saved_tensors_hooks` plugs in (pack at save time, unpack at use time): the seam that
half-precision storage, int8 compression and offload use. The ledger counts saved arrays in the
``activation`` bucket until backward has used them.

Backward is iterative (Kahn's algorithm over dependency counts), so a chain of thousands of
nodes needs no recursion; each node's saved arrays and incoming gradients are dropped as soon as
its backward has run.
"""
import contextlib
import threading

import numpy as np

from . import backend, memory


class _State(threading.local):
    """Grad mode and saved-tensor hooks are per thread, as in PyTorch."""

    def __init__(self):
        self.grad_enabled = True
        self.hooks = []
        self.recomputing = False
        self.forward_contexts = []


_state = _State()


def is_grad_enabled():
    return _state.grad_enabled


def is_recomputing():
    """True while a checkpoint re-runs a forward inside backward.

    Layers with side effects in forward (BatchNorm's running statistics) check this so that
    recomputation does not apply them a second time.
    """
    return _state.recomputing


class forward_context:
    """``with forward_context(factory):`` — recomputations of what runs inside re-enter ``factory()``.

    A technique that changes how a forward computes (half precision upcasting weights on use and
    storing saved tensors in half) registers a factory of its context managers here. A checkpoint
    captures the active factories in its forward and re-enters them when it recomputes in
    backward, long after the technique's ``with`` block has exited, so the recomputed forward
    computes exactly as the first one did (PyTorch's checkpoint restores autocast for the same
    reason).
    """

    def __init__(self, factory):
        self.factory = factory

    def __enter__(self):
        _state.forward_contexts.append(self.factory)
        return self

    def __exit__(self, *exc):
        _state.forward_contexts.pop()


def forward_contexts():
    """The factories of the :class:`forward_context` blocks active now, outermost first."""
    return tuple(_state.forward_contexts)


class recomputing:
    """Marks a forward as a recomputation (used by checkpointing) and re-enters ``contexts``,
    the :func:`forward_contexts` captured when the forward first ran."""

    def __init__(self, contexts=()):
        self.contexts = tuple(contexts)

    def __enter__(self):
        self.prev = _state.recomputing
        _state.recomputing = True
        self.stack = contextlib.ExitStack()
        try:
            for factory in self.contexts:
                self.stack.enter_context(forward_context(factory))
                self.stack.enter_context(factory())
        except BaseException:
            self.stack.close()
            _state.recomputing = self.prev
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.stack.close()
        finally:
            _state.recomputing = self.prev


class _GradMode:
    def __init__(self, enabled):
        self.enabled = enabled

    def __enter__(self):
        self.prev = _state.grad_enabled
        _state.grad_enabled = self.enabled

    def __exit__(self, *exc):
        _state.grad_enabled = self.prev

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with _GradMode(self.enabled):
                return fn(*args, **kwargs)
        return wrapper


def no_grad():
    """Context manager (or decorator): ops record no graph and save nothing for backward."""
    return _GradMode(False)


def enable_grad():
    return _GradMode(True)


def set_grad_enabled(mode):
    return _GradMode(bool(mode))


class saved_tensors_hooks:
    """``with saved_tensors_hooks(pack, unpack):`` every tensor saved for backward inside the
    block goes through ``pack(tensor)`` when saved and ``unpack(packed)`` when backward needs it.

    ``pack`` receives a detached :class:`Tensor` sharing the saved array; ``unpack`` returns a
    Tensor or an array of the same shape and dtype. If ``pack`` returns a Tensor or an array,
    the ledger counts *that* in the ``activation`` bucket (at its own place); a hook storing
    elsewhere (a file) registers its bytes itself with :func:`tinymem.memory.register_bytes`.
    The innermost hooks win, as in PyTorch.
    """

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook, self.unpack_hook = pack_hook, unpack_hook

    def __enter__(self):
        _state.hooks.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _state.hooks.pop()


def current_saved_tensors_hooks():
    """The innermost active ``(pack, unpack)`` pair, or ``None``.

    A hook that handles only some tensors (layer streaming handles the weights it brought in)
    passes the others on to the pair it shadows, so techniques compose.
    """
    return _state.hooks[-1] if _state.hooks else None


class saved_as_is:
    """``with saved_as_is():`` tensors saved inside bypass every :class:`saved_tensors_hooks`.

    For saves that must come back exactly, whatever technique is active: a checkpoint's inputs
    are the start of its recomputation, and a lossy hook (half or int8 storage) would make the
    recomputed activations differ from the first forward's.
    """

    def __enter__(self):
        _state.hooks.append(None)
        return self

    def __exit__(self, *exc):
        _state.hooks.pop()


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


def _as_array(data, dtype, device):
    xp = backend.array_module(device)
    if isinstance(data, Tensor):
        data = data.data
    if backend.device_of(data) != device and hasattr(data, "shape"):
        data = backend.to_device(data, device)
    if dtype is None:
        arr = xp.asarray(data)
        if arr.dtype == np.float64 and not hasattr(data, "dtype"):
            arr = arr.astype(np.float32)  # Python floats become float32, as in PyTorch
        elif arr.dtype.kind in "iu" and not hasattr(data, "dtype"):
            arr = arr.astype(np.int64)
    else:
        arr = xp.asarray(data, dtype=dtype)
    return arr


class Tensor:
    """An array with an optional gradient and a link to the op that made it.

    Attributes: ``data`` (the NumPy or CuPy array), ``grad`` (a Tensor or ``None``),
    ``requires_grad``, ``shape``, ``dtype``, ``device``. The ledger counts ``data`` in the
    tensor's bucket (``workspace`` unless it is a Parameter, a gradient or optimizer state).
    """

    __array_priority__ = 1000  # so ndarray + Tensor calls Tensor.__radd__
    __hash__ = object.__hash__  # == is elementwise, yet tensors key dicts (optimizer state)
    _bucket = "workspace"

    def __init__(self, data, requires_grad=False, dtype=None, device=None):
        device = backend.check_device(device) if device is not None else (
            backend.device_of(data.data if isinstance(data, Tensor) else data)
            if hasattr(data, "shape") else backend.default_device())
        self._data = None
        self.data = _as_array(data, backend.resolve_dtype(dtype), device)
        self._ctx = None
        self._index = 0
        self._grad = None
        self.requires_grad = bool(requires_grad)
        if requires_grad and self._data.dtype.kind not in "fc":
            raise TypeError(f"only floating-point tensors can require gradients, not {self._data.dtype}")

    @classmethod
    def _wrap(cls, array, requires_grad=False, ctx=None, index=0, bucket=None):
        t = cls.__new__(cls)
        if bucket is not None:
            t._bucket = bucket
        t._data = array
        memory.register(array, t._bucket)
        t._ctx, t._index, t._grad, t.requires_grad = ctx, index, None, requires_grad
        return t

    # -- data and grad ---------------------------------------------------------------------
    @property
    def data(self):
        return self._data

    @data.setter
    def data(self, value):
        if isinstance(value, Tensor):
            value = value.data
        memory.register(value, self._bucket)
        self._data = value

    @property
    def grad(self):
        return self._grad

    @grad.setter
    def grad(self, value):
        if value is not None:
            if not isinstance(value, Tensor):
                value = Tensor._wrap(value)
            if value.shape != self.shape:
                raise ValueError(f"assigned grad of shape {value.shape} to a tensor of shape {self.shape}")
            value._bucket = "gradient"
            memory.register(value.data, "gradient")
        self._grad = value

    @property
    def shape(self):
        return self._data.shape

    @property
    def dtype(self):
        return self._data.dtype

    @property
    def ndim(self):
        return self._data.ndim

    @property
    def size(self):
        return self._data.size

    @property
    def nbytes(self):
        return self._data.nbytes

    @property
    def device(self):
        return backend.device_of(self._data)

    @property
    def is_leaf(self):
        return self._ctx is None

    @property
    def grad_fn(self):
        return self._ctx

    def numel(self):
        return self._data.size

    def dim(self):
        return self._data.ndim

    def __len__(self):
        return len(self._data)

    def __repr__(self):
        extra = f", grad_fn={type(self._ctx).__name__}" if self._ctx is not None else (
            ", requires_grad=True" if self.requires_grad else "")
        dev = "" if self.device == "cpu" else ", device='cuda'"
        return f"tensor({backend.to_numpy(self._data)!r}{dev}{extra})"

    # -- conversion ------------------------------------------------------------------------
    def numpy(self):
        """The values as a NumPy array (copied from the GPU when needed)."""
        return backend.to_numpy(self._data)

    def item(self):
        if self._data.size != 1:
            raise ValueError(f"item() needs a tensor with one element, this one has shape {self.shape}")
        return self._data.reshape(()).item()

    def tolist(self):
        return self.numpy().tolist()

    def detach(self):
        """A new leaf sharing this tensor's data, outside the graph."""
        return Tensor._wrap(self._data)

    def to(self, device=None, dtype=None):
        """Move to ``device`` and/or cast to ``dtype`` (differentiable). ``to("float16")`` casts."""
        if isinstance(device, str) and device not in backend.DEVICES and not device.startswith("cuda"):
            device, dtype = None, device
        from .ops.shape import to_device_cast
        return to_device_cast(self, device, dtype)

    def cpu(self):
        return self.to("cpu")

    def cuda(self):
        return self.to("cuda")

    def float(self):
        return self.to(dtype="float32")

    def double(self):
        return self.to(dtype="float64")

    def half(self):
        return self.to(dtype="float16")

    def requires_grad_(self, flag=True):
        self.requires_grad = bool(flag)
        return self

    def clone(self):
        return self * 1

    # -- backward --------------------------------------------------------------------------
    def backward(self, grad=None, retain_graph=False):
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad``.

        ``grad`` is required unless this tensor has one element (the usual scalar loss).
        """
        if not self.requires_grad:
            raise RuntimeError("backward() on a tensor that does not require grad "
                               "(no input had requires_grad=True, or it was made under no_grad())")
        xp = backend.array_module(self._data)
        if grad is None:
            if self._data.size != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs; this "
                                   f"tensor has shape {self.shape}: pass backward(grad) of that shape")
            g = xp.ones(self.shape, self.dtype)
        else:
            g = grad.data if isinstance(grad, Tensor) else xp.asarray(grad, dtype=self.dtype)
            if g.shape != self.shape:
                raise ValueError(f"backward: grad of shape {g.shape} for a tensor of shape {self.shape}")
        run_backward((self,), (g,), retain_graph=retain_graph)

    def zero_(self):
        self._data[...] = 0
        return self


def tensor(data, requires_grad=False, dtype=None, device=None):
    """Make a leaf Tensor (PyTorch's ``torch.tensor``). Python floats give float32."""
    return Tensor(data, requires_grad=requires_grad, dtype=dtype, device=device)


def backward(tensors, grad_tensors=None, retain_graph=False):
    """Backward from several outputs at once (``torch.autograd.backward``)."""
    tensors = list(tensors)
    if grad_tensors is None:
        grad_tensors = [None] * len(tensors)
    grads = []
    for t, g in zip(tensors, grad_tensors):
        xp = backend.array_module(t.data)
        grads.append(xp.ones(t.shape, t.dtype) if g is None else (g.data if isinstance(g, Tensor) else g))
    run_backward(tensors, grads, retain_graph=retain_graph)
