"""Function: one differentiable op, the node of the graph (it doubles as the ``ctx``).

Functions compute on raw arrays (NumPy or CuPy) and return raw arrays; :meth:`Function.apply`
wraps the results into Tensors and records the node when a gradient is needed. A node points to
the nodes that made its inputs, never to its outputs, so a finished graph is freed by reference
counting alone.

Everything a backward needs is kept through :meth:`Function.save_for_backward`, where
:class:`~tinymem.autograd.modes.saved_tensors_hooks` plug in (pack at save time, unpack at use
time): the seam that half-precision storage, int8 compression and offload use. The ledger counts
saved arrays in the ``activation`` bucket until backward has used them.
"""
import numpy as np

from .. import backend
from ..backend import device_of
from ..memory import attribution
from ..memory.attribution import SCOPE
from ..memory import hold, register, unhold
from .modes import _local
from .tensor import Tensor

_ndarray = np.ndarray
_new_object = object.__new__
# Bound once: Python 3.11 does not cache a classmethod looked up on its class, and apply runs
# once per op.
_wrap = Tensor.wrap

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

    # An op whose output can be handed to it defines keep_for_backward(ctx, out, *args,
    # **kwargs): what forward keeps for backward, without computing ``out`` (see op_hook).
    keep_for_backward = None
    # Defaults as class attributes: a node is made for every op, and an instance that never
    # records (no_grad, inputs without requires_grad) then only sets the two fields it uses.
    parents = ()
    needs_input_grad = ()
    recording = False
    _saved = None
    _released = False
    _hooks = ()

    # -- saving ---------------------------------------------------------------------------
    def save_for_backward(self, *arrays):
        """Keep arrays for backward. Memory: their bytes stay in ``activation`` until used."""
        if not self.recording:
            return
        hooks = self._hooks
        if hooks and hooks[-1] is not None:
            pack, unpack = hooks[-1]
            saved = []
            for a in arrays:
                if a is None:
                    saved.append(None)
                    continue
                packed = pack(Tensor.wrap(a))
                storage = _storage(packed)
                if storage is not None:
                    hold(storage)
                saved.append((unpack, packed, storage))
            self._saved = (True, saved)
        else:
            for a in arrays:
                if a is not None:
                    hold(a)
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
        self._drop_saved()
        self._released = True

    def _drop_saved(self):
        saved = self._saved
        if saved is not None:
            self._saved = None
            hooked, items = saved
            if hooked:
                for item in items:
                    if item is not None and item[2] is not None:
                        unhold(item[2])
            else:
                for a in items:
                    if a is not None:
                        unhold(a)

    # A graph dropped without backward (evaluation with grad on) still gives its bytes back.
    # The method itself, not a wrapper calling it: __del__ runs once per op, and a dying node
    # need not be marked released.
    __del__ = _drop_saved

    # -- running --------------------------------------------------------------------------
    @classmethod
    def apply(cls, *inputs, **kwargs):
        """Run the op on Tensors (and constants), recording the graph when a gradient is needed.

        Cost: a few microseconds of Python per call whatever the size of the arrays, which is all
        a tiny op costs (measured against PyTorch by ``tinymem bench targets``). Hence one pass
        over the inputs gathers everything the node needs, each per-thread state is read once
        (a thread-local read costs as much as a call), and one output, the common case, is
        wrapped without a loop and without a call to ``Tensor.wrap``.
        """
        first = None  # the first tensor's array type: arrays of one type share a device
        arrays, needs, parents = [], [], []
        for x in inputs:
            if isinstance(x, Tensor):
                data = x._data
                if first is None:
                    first = data
                elif type(data) is not type(first) and device_of(data) != device_of(first):
                    raise backend.DeviceError(
                        f"{cls.__name__}: tensors on different devices ({device_of(first)} and "
                        f"{device_of(data)}); move them with .to('{device_of(first)}') first")
                arrays.append(data)
                requires, node = x.requires_grad, x._ctx
                needs.append(requires)
                # A gradient for x goes to the node that made it, or to x itself if it is a leaf
                # that requires one.
                parents.append((node, x._index) if node is not None else (x if requires else None))
            else:
                arrays.append(x)
                needs.append(False)
                parents.append(None)
        state = _local.state
        record = state.grad_enabled and True in needs
        ctx = cls()
        ctx.recording = record
        ctx.needs_input_grad = tuple(needs)
        if record:  # this thread's saved-tensor hooks (a live list), read by save_for_backward
            ctx._hooks = state.hooks
        scope = SCOPE.current
        outer_op = scope.op  # the ledger stamps new arrays with the op (attribution.enter_op)
        if attribution.ENABLED:
            scope.op = cls.__name__
        try:
            hook = state.op_hook
            if hook is not None and hook.wants(cls):
                out = hook.run(cls, ctx, arrays, kwargs)
            elif kwargs:
                out = cls.forward(ctx, *arrays, **kwargs)
            else:  # no keyword dict to build and unpack: the common case
                out = cls.forward(ctx, *arrays)
            node = ctx if record else None
            if type(out) is not tuple:  # one output, the common case: no loop and no lists
                if type(out) is not _ndarray and isinstance(out, np.generic):
                    out = np.asarray(out)  # NumPy turns 0-d results into scalars; a Tensor holds an array
                # Tensor.wrap(out, record, node, 0) written out: the call costs as much as the rest.
                result = _new_object(Tensor)
                result._data, result._ctx, result._index, result._grad, result.requires_grad = (
                    out, node, 0, None, record)
                register(out)
                output_meta = [(out.shape, out.dtype)]  # for zeros when an output gets no gradient
            else:
                result, output_meta = [], []
                for i, o in enumerate(out):
                    if type(o) is not _ndarray and isinstance(o, np.generic):
                        o = np.asarray(o)
                    result.append(_wrap(o, record, node, i))
                    output_meta.append((o.shape, o.dtype))
                result = tuple(result)
        finally:
            scope.op = outer_op
        if record:
            # Lists, not tuples: the engine only reads them, and a tuple(...) call per list per op
            # is time a tiny op notices. An input's shape, which backward needs to sum a broadcast
            # gradient back, is its parent's: a node's output_meta, or a leaf's own.
            ctx.parents, ctx.output_meta = parents, output_meta
            ctx.module_path = scope.path  # backward stamps its arrays with the module
        return result

    def forward(ctx, *args, **kwargs):
        raise NotImplementedError(f"{type(ctx).__name__} must define forward")

    def backward(ctx, *grads):
        raise NotImplementedError(f"{type(ctx).__name__} has no backward")

