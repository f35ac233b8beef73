"""Gradient checkpointing: keep a segment's inputs, recompute its activations in backward.

A segment of k layers on a batch whose states each take S bytes normally keeps every array its
layers save for backward (for Linear -> ReLU blocks: 2·S bytes per block, 2·k·S in all).
Checkpointed, it keeps only its input (S bytes) and, when backward reaches it, runs its forward
again with the graph recorded and backpropagates through that fresh graph: one extra forward of
the segment buys (2·k - 1)·S bytes. Over n layers in ``ceil(sqrt(n))`` segments the activation
peak drops from O(n) to O(sqrt(n)) (Chen et al. 2016, "Training Deep Nets with Sublinear Memory
Cost") for about one extra forward pass (~+33% step time when backward costs twice a forward).

Contract (the one of PyTorch's reentrant ``torch.utils.checkpoint``, with its pitfalls closed):

- **RNG.** With ``preserve_rng_state=True`` (the default) the RNG state is saved before the
  forward and restored before the recomputation, so dropout draws the same mask twice and the
  gradients are bit-identical to the plain run. The caller's RNG state is restored afterwards.
- **Forward contexts.** Techniques that change how a forward computes (half precision) register
  with :class:`tinymem.autograd.forward_context`; the recomputation re-enters them, so it
  computes exactly as the first forward did.
- **Inputs are saved as they are**, past any ``saved_tensors_hooks`` (half storage, int8
  compression, offload): the recomputation must start from the exact values the forward saw.
- **Side effects.** The recomputation runs inside :class:`tinymem.autograd.recomputing`; a layer
  with forward side effects (BatchNorm's running statistics) checks
  :func:`tinymem.autograd.is_recomputing` so they are applied once, not twice.
- **Parameters.** Gradients of a Module's parameters arrive even when no input requires grad:
  the parameters of a Module (or of a bound method of one, or of a checkpointed segment) are
  found and make the node record. A plain function that closes over parameters is opaque:
  give it an input that requires grad or pass a Module (a warning says so).
- **no_grad.** Under ``tm.no_grad()`` the function simply runs: nothing is saved, the outputs
  do not require grad. A ``no_grad()`` block inside the function is honoured in the
  recomputation too, so no gradient flows through it, as in PyTorch.
- **Outputs** must be a Tensor or a tuple of Tensors; anything else is a ``TypeError``.
- **The last segment** of :func:`checkpoint_sequential` is not checkpointed: its activations
  are needed right away by backward, so recomputing it would only cost time.
"""
import contextlib
import functools
import math
import warnings

from ... import autograd, random
from ...autograd import Function, Tensor, no_grad
from .selective import ReplayOutputs, StoreOutputs, as_policy


class _GradSink(Function):
    """Identity in forward; in backward it keeps the gradient in ``box[index]`` and stops it.

    The recomputed graph starts at fresh leaves; their gradient is caught here rather than in
    ``leaf.grad``, so the ledger counts it as workspace (a gradient in flight), not in the
    ``gradient`` bucket that holds parameters' ``.grad``.
    """

    def forward(ctx, x, box=None, index=0):
        ctx.box, ctx.index = box, index
        return x

    def backward(ctx, g):
        ctx.box[ctx.index] = g
        return None


def _as_outputs(out, function):
    """The function's outputs as a tuple of Tensors, or a TypeError that says what came back."""
    outs = out if isinstance(out, tuple) else (out,)
    for o in outs:
        if not isinstance(o, Tensor):
            name = getattr(function, "__name__", type(function).__name__)
            raise TypeError(
                f"checkpoint: the checkpointed function {name} returned a {type(o).__name__}; it "
                f"must return a Tensor or a tuple of Tensors (return other values from outside "
                f"the checkpointed function)")
    return outs


def record(function, args, needs_grad, tensor_mask=None):
    """Run ``function(*args)`` recording its graph from fresh leaves; returns (outputs, box).

    ``args`` are arrays (passed on as Tensors) or, where ``tensor_mask`` is False, constants
    passed on as they are; ``needs_grad[i]`` says whether ``args[i]`` wants a gradient, which
    backward through ``outputs`` leaves in ``box[i]``. Parameters reached inside the graph are
    leaves of it: their ``.grad`` accumulates as usual.
    """
    box = [None] * len(args)
    tensor_mask = tensor_mask or (True,) * len(args)
    with autograd.enable_grad():
        inputs = [a if not is_t else
                  _GradSink.apply(Tensor.wrap(a, requires_grad=True), box=box, index=i) if needs
                  else Tensor.wrap(a)
                  for i, (a, needs, is_t) in enumerate(zip(args, needs_grad, tensor_mask))]
        outputs = _as_outputs(function(*inputs), function)
    return outputs, box


def backprop(outputs, out_grads):
    """Backward from the outputs that require grad (the others carry no gradient)."""
    pairs = [(o, g) for o, g in zip(outputs, out_grads) if o.requires_grad and g is not None]
    if pairs:
        autograd.run_backward([o for o, _ in pairs], [g for _, g in pairs])


def replay(function, args, needs_grad, out_grads, rng_state=None, tensor_mask=None, contexts=(), hook=None):
    """Recompute ``function(*args)`` with the graph recorded and backpropagate ``out_grads``.

    The RNG is set to ``rng_state`` for the recomputation (and given back afterwards), and the
    recomputation is marked with :class:`tinymem.autograd.recomputing`, which re-enters the
    ``contexts`` captured from :func:`tinymem.autograd.forward_contexts` when the forward first
    ran (half precision's weight upcasts and saved-tensor hooks, say); ``hook`` (a selective
    checkpoint's :class:`~tinymem.techniques.checkpoint.selective.ReplayOutputs`) hands kept
    ops their stored outputs. Returns the input gradients (``None`` where none was asked or
    none flowed). Memory: the recomputed graph's saved arrays live until this nested backward
    has used them.
    """
    outer = random.get_rng_state()
    if rng_state is not None:
        random.set_rng_state(rng_state)
    try:
        with autograd.recomputing(contexts):
            if hook is None:
                outputs, box = record(function, args, needs_grad, tensor_mask)
            else:
                with autograd.op_hook(hook):
                    outputs, box = record(function, args, needs_grad, tensor_mask)
                hook.check_done()
    finally:
        if rng_state is not None:
            random.set_rng_state(outer)
    backprop(outputs, out_grads)
    return box


def parameters_of(function):
    """Trainable parameters a callable is known to use: a Module's, a bound Module method's, or
    anything with a ``parameters()`` method (a segment). ``None`` when they cannot be known."""
    if isinstance(function, functools.partial):
        function = function.func
    owner = function if hasattr(function, "parameters") else getattr(function, "__self__", None)
    parameters = getattr(owner, "parameters", None)
    if not callable(parameters):
        return None
    return [p for p in parameters() if p.requires_grad]


class CheckpointFunction(Function):
    """The checkpoint node: its forward runs ``function`` without a graph and saves only the
    tensor inputs; its backward recomputes and backpropagates (see the module docstring).

    Positional inputs are the function's arguments followed by the parameters it uses; the
    parameters are inputs only so that the node records when they want a gradient (their
    gradients arrive as leaves of the recomputed graph, so this node returns ``None`` for them).
    """

    def forward(ctx, *arrays, function, n_args, tensor_mask, preserve_rng_state, policy=None):
        ctx.function, ctx.n_args, ctx.tensor_mask, ctx.policy = function, n_args, tensor_mask, policy
        ctx.rng_state = random.get_rng_state() if preserve_rng_state else None
        ctx.contexts = autograd.forward_contexts()
        args = arrays[:n_args]
        ctx.constants = [None if is_t else a for a, is_t in zip(args, tensor_mask)]
        store = StoreOutputs(policy) if policy is not None else None
        with no_grad(), autograd.op_hook(store) if store is not None else contextlib.nullcontext():
            out = function(*[Tensor.wrap(a) if is_t else a for a, is_t in zip(args, tensor_mask)])
        outs = _as_outputs(out, function)
        kept = [] if store is None else store.outputs
        ctx.kept_ops = () if store is None else tuple(store.ops)
        # Saved exactly, past any saved_tensors_hooks: the recomputation must start from the
        # very values the forward saw (a half or int8 hook would round them).
        with autograd.saved_as_is():
            ctx.save_for_backward(*[a for a, is_t in zip(args, tensor_mask) if is_t], *kept)
        datas = tuple(o.data for o in outs)
        return datas if isinstance(out, tuple) else datas[0]

    def backward(ctx, *grads):
        saved = ctx.saved_tensors
        n_inputs = sum(ctx.tensor_mask)
        inputs, kept = iter(saved[:n_inputs]), saved[n_inputs:]
        args = [next(inputs) if is_t else c for c, is_t in zip(ctx.constants, ctx.tensor_mask)]
        needs = ctx.needs_input_grad[:ctx.n_args]
        hook = ReplayOutputs(ctx.policy, ctx.kept_ops, kept) if ctx.policy is not None else None
        box = replay(ctx.function, args, needs, grads, ctx.rng_state, ctx.tensor_mask, ctx.contexts, hook)
        return tuple(box) + (None,) * (len(ctx.needs_input_grad) - ctx.n_args)


def checkpoint(function, *args, preserve_rng_state=True, policy=None, **kwargs):
    """Run ``function(*args, **kwargs)`` keeping only its tensor inputs for backward.

    Memory: saves the tensor inputs (their bytes) instead of every array the function's ops
    would save; backward holds one recomputed graph of the function at a time.
    Time: one extra forward of ``function`` in backward.

    ``policy`` makes it selective (``selective.py``): a
    :class:`~tinymem.techniques.checkpoint.selective.Policy`, or a list of op names whose
    outputs are kept as well (``["linear", "matmul", "conv2d"]``); backward then recomputes only
    the other ops. Memory: plus the kept outputs. Time: the recomputation minus the kept ops.
    """
    if not callable(function):
        raise TypeError(f"checkpoint: the first argument must be the function or Module to run, got a "
                        f"{type(function).__name__}")
    policy = as_policy(policy)
    if kwargs:
        function = functools.partial(function, **kwargs)
    if not autograd.is_grad_enabled():
        return function(*args)
    params = parameters_of(function)
    if params is None:
        params = []
        if not any(isinstance(a, Tensor) and a.requires_grad for a in args):
            warnings.warn("checkpoint: no input requires grad and the function is not a Module, so "
                          "parameters it closes over get no gradient; pass a Module or an input with "
                          "requires_grad=True", stacklevel=2)
    tensor_mask = tuple(isinstance(a, Tensor) for a in args)
    return CheckpointFunction.apply(*args, *params, function=function, n_args=len(args),
                                    tensor_mask=tensor_mask, preserve_rng_state=preserve_rng_state,
                                    policy=policy)


class Segment:
    """Layers run one after the other; knows their parameters (so checkpointing can find them)."""

    def __init__(self, functions):
        self.functions = list(functions)

    def __call__(self, x):
        for f in self.functions:
            x = f(x)
        return x

    def parameters(self):
        params = []
        for f in self.functions:
            found = parameters_of(f)
            params.extend(found or [])
        return params


def as_layer_list(functions):
    """A list of callables from a list, a tuple or an ``nn.Sequential``."""
    if not hasattr(functions, "__iter__"):
        raise TypeError(f"checkpointing a sequence takes an nn.Sequential or a list of layers, got a "
                        f"{type(functions).__name__}; wrap one layer as nn.Sequential(layer)")
    layers = list(functions)
    if not layers:
        raise ValueError("checkpointing needs at least one layer, got an empty sequence")
    for f in layers:
        if not callable(f):
            raise TypeError(f"every layer must be callable, got a {type(f).__name__}")
    return layers


def resolve_segments(segments, n):
    """``"sqrt"`` -> ceil(sqrt(n)); an int must lie in 1..n."""
    if segments == "sqrt":
        return max(1, math.ceil(math.sqrt(n)))
    if isinstance(segments, bool) or not isinstance(segments, int):
        raise TypeError(f"segments must be an int or 'sqrt', got {segments!r}")
    if not 1 <= segments <= n:
        raise ValueError(f"segments must be between 1 and the number of layers ({n}), got {segments}")
    return segments


def checkpoint_sequential(functions, segments, input, preserve_rng_state=True, policy=None):
    """Run ``functions`` (a list or ``nn.Sequential``) on ``input`` in ``segments`` pieces.

    PyTorch's semantics: with n layers the first ``segments - 1`` segments have ``n // segments``
    layers each and are checkpointed; the last one takes the rest and runs normally (its
    activations are needed at once). ``segments="sqrt"`` takes ceil(sqrt(n)); ``segments=1``
    checkpoints nothing.

    Memory (n layers, per-layer saved bytes a, state bytes S): (segments - 1)·S for the kept
    inputs plus the largest of the last segment's and one recomputed segment's saved bytes, about
    (segments - 1)·S + (n / segments)·a. Time: every layer outside the last segment runs twice.
    ``policy`` makes every segment selective (see :func:`checkpoint`).
    """
    layers = as_layer_list(functions)
    n = len(layers)
    segments = resolve_segments(segments, n)
    size = n // segments
    end = 0
    for start in range(0, size * (segments - 1), size):
        end = start + size
        input = checkpoint(Segment(layers[start:end]), input, preserve_rng_state=preserve_rng_state,
                           policy=policy)
    return Segment(layers[end:])(input)
