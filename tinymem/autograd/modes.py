"""Per-thread modes of the autograd engine, and the context managers that set them.

Grad mode (``no_grad``), saved-tensor hooks (the seam for half, int8 and offloaded storage of
saved tensors), ``saved_as_is`` (saves that bypass the hooks), forward contexts (what a
recomputation must re-enter), the recomputation flag and the op hook (the seam for selective
recomputation). Everything here is thread-local, as in
PyTorch, so an offload prefetch thread never sees the main thread's modes.

Memory cost: none.
"""
import contextlib
import functools
import inspect
import threading


class _State:
    """One thread's modes. A plain object, not the ``threading.local`` itself: every op reads
    it, and an attribute of a ``threading.local`` costs about ten times a plain one (the
    thread's dictionary is found first), so code reads ``_local.state`` once and then works
    on this."""

    __slots__ = ("grad_enabled", "hooks", "recomputing", "forward_contexts", "op_hook")

    def __init__(self):
        self.grad_enabled = True
        self.hooks = []
        self.recomputing = False
        self.forward_contexts = []
        self.op_hook = None


class _PerThread(threading.local):
    """Grad mode and saved-tensor hooks are per thread, as in PyTorch: each thread that asks
    gets its own :class:`_State`."""

    def __init__(self):
        self.state = _State()


_local = _PerThread()


def is_grad_enabled():
    return _local.state.grad_enabled


def is_recomputing():
    """True while a checkpoint re-runs a forward inside backward.

    Layers with side effects in forward (BatchNorm's running statistics) check this so that
    recomputation does not apply them a second time.
    """
    return _local.state.recomputing


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
        _local.state.forward_contexts.append(self.factory)
        return self

    def __exit__(self, *exc):
        _local.state.forward_contexts.pop()


def forward_contexts():
    """The factories of the :class:`forward_context` blocks active now, outermost first."""
    return tuple(_local.state.forward_contexts)


class recomputing:
    """Marks a forward as a recomputation (used by checkpointing) and re-enters ``contexts``,
    the :func:`forward_contexts` captured when the forward first ran."""

    def __init__(self, contexts=()):
        self.contexts = tuple(contexts)

    def __enter__(self):
        state = _local.state
        self.prev, state.recomputing = state.recomputing, True
        self.stack = contextlib.ExitStack()
        try:
            for factory in self.contexts:
                self.stack.enter_context(forward_context(factory))
                self.stack.enter_context(factory())
        except BaseException:
            self.stack.close()
            state.recomputing = self.prev
            raise
        return self

    def __exit__(self, *exc):
        try:
            self.stack.close()
        finally:
            _local.state.recomputing = self.prev


class _GradMode:
    """``no_grad()``, ``enable_grad()``: a context manager, or a decorator of a function or a
    generator (each step of the generator runs in the mode, as in PyTorch)."""

    def __init__(self, enabled):
        self.enabled = enabled

    def __enter__(self):
        state = _local.state
        self.prev, state.grad_enabled = state.grad_enabled, self.enabled

    def __exit__(self, *exc):
        _local.state.grad_enabled = self.prev

    def __call__(self, fn):
        enabled = self.enabled
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def generator(*args, **kwargs):
                gen = fn(*args, **kwargs)
                # Each resumption in the mode, and the caller's mode in between (a yield hands
                # control back to code that may be recording a graph).
                with _GradMode(enabled):
                    value = next(gen)
                while True:
                    try:
                        sent = yield value
                    except GeneratorExit:
                        gen.close()
                        raise
                    except BaseException as exc:  # noqa: BLE001 - thrown in, passed to the generator
                        with _GradMode(enabled):
                            value = gen.throw(exc)
                    else:
                        try:
                            with _GradMode(enabled):
                                value = gen.send(sent)
                        except StopIteration as stop:
                            return stop.value
            return generator

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _GradMode(enabled):
                return fn(*args, **kwargs)
        return wrapper


def no_grad(fn=None):
    """Context manager (or decorator, ``@no_grad()`` or ``@no_grad``): ops record no graph and
    save nothing for backward."""
    mode = _GradMode(False)
    return mode if fn is None else mode(fn)


def enable_grad(fn=None):
    mode = _GradMode(True)
    return mode if fn is None else mode(fn)


class set_grad_enabled(_GradMode):
    """``set_grad_enabled(False)`` switches the mode at once, as in PyTorch (called alone it
    stays switched; as a context manager the previous mode comes back at the end)."""

    def __init__(self, mode):
        super().__init__(bool(mode))
        state = _local.state
        self.prev, state.grad_enabled = state.grad_enabled, self.enabled

    def __enter__(self):
        return self  # already switched by __init__; __exit__ restores the mode before it


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
        _local.state.hooks.append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _local.state.hooks.pop()


def current_saved_tensors_hooks():
    """The innermost active ``(pack, unpack)`` pair, or ``None``.

    A hook that handles only some tensors (layer streaming handles the weights it brought in)
    passes the others on to the pair it shadows, so techniques compose.
    """
    hooks = _local.state.hooks
    return hooks[-1] if hooks else None


class saved_as_is:
    """``with saved_as_is():`` tensors saved inside bypass every :class:`saved_tensors_hooks`.

    For saves that must come back exactly, whatever technique is active: a checkpoint's inputs
    are the start of its recomputation, and a lossy hook (half or int8 storage) would make the
    recomputed activations differ from the first forward's.
    """

    def __enter__(self):
        _local.state.hooks.append(None)
        return self

    def __exit__(self, *exc):
        _local.state.hooks.pop()


class op_hook:
    """``with op_hook(hook):`` ops for which ``hook.wants(op_class)`` is true are run by
    ``hook.run(op_class, ctx, arrays, kwargs)`` instead of ``op_class.forward(ctx, *arrays)``.

    The seam of selective recomputation: a checkpoint's forward lets the hook keep the outputs
    of chosen ops (matmuls, convolutions), and its recomputation lets the hook hand them back
    without computing them, through :meth:`Function.keep_for_backward`. The innermost hook
    wins; ``op_hook(None)`` switches hooks off inside. Cost per op when no hook is set: one
    attribute read.
    """

    def __init__(self, hook):
        self.hook = hook

    def __enter__(self):
        state = _local.state
        self.prev, state.op_hook = state.op_hook, self.hook
        return self

    def __exit__(self, *exc):
        _local.state.op_hook = self.prev
