"""Half-precision storage with fp32 master weights: ``half(model, optimizer, dtype)``.

Contract (the recipe of Micikevicius et al. 2018; the lesson 02 walks through it):
- Parameters, saved activations and parameter gradients are stored in float16 or bfloat16
  (2 bytes per value instead of 4); :class:`HalfModule` stores every float32 tensor saved for
  backward in half through ``saved_tensors_hooks`` (a tensor saved twice is stored once) and
  upcasts a module's parameters only while that module's forward runs (:class:`Upcast`).
- :class:`MasterOptimizer` keeps an fp32 master of every weight (4 B/param, ``optimizer``
  bucket), updates it, and rounds it back into the half weight: updating half weights directly
  would lose every update below half an ulp (in float16, 1.0 + 1e-4 == 1.0).
- float16 needs loss scaling (:class:`GradScaler`); bfloat16 does not.

Memory per parameter with Adam: fp32 4 + 4 + 8 = 16 B; mixed 2 + 2 + 4 + 8 = 16 B (+4 B of fp32
master gradients during the step). The saving is in the activations, 2 B per saved value
instead of 4, so the peak approaches 0.5x for activation-dominated training.

Where the arithmetic happens: on NumPy compute stays float32 (NumPy has no fast fp16 matmul), so
half arrays are upcast when used and results stored half again, and the gradient leaving each
module is rounded to half (:class:`RoundGrad`) so underflow happens as on a GPU. On CuPy float16
computes in float16; bfloat16 (stored as uint16 bits, CuPy has no bfloat16) is upcast. Model
outputs come back float32 so the loss runs in float32, as autocast does.

Pitfalls:
- The wrapped model's parameters *are* half (bfloat16 ones are uint16 bits): call it through the
  returned :class:`HalfModule`; save weights with ``optimizer.state_dict()`` (the fp32 masters).
- A parameter read from *another* module's forward is not upcast; share the Parameter instead.
- Clip after ``scaler.unscale_(optimizer)``, on ``optimizer.master_params()``.
"""
import contextlib
import weakref

import numpy as np

from ... import backend, memory
from ...autograd import Function, Tensor, forward_context, saved_tensors_hooks
from ...nn import Module
from .formats import get_format
from .masters import MasterOptimizer

FP16_MIN_SUBNORMAL = 2.0 ** -24   # 5.96e-8: below half of it, a value rounds to 0
FP16_MIN_NORMAL = 2.0 ** -14      # 6.10e-5: below it, fewer than 11 bits of precision are left
FP16_MAX = 65504.0                # above 65520 a value rounds to inf


class Upcast(Function):
    """A half parameter, decoded to the compute dtype for one use.

    Forward: one array of the parameter's shape in the compute dtype (4 bytes per value on the
    CPU; none on a GPU in float16, where the parameter itself is used). Saves nothing.
    Backward: rounds the gradient to the half format and adds it into ``param.grad`` (2 bytes
    per value); returns no gradient to the engine, which cannot add bfloat16 bits.
    """

    def forward(ctx, stored, fmt=None, dtype=None, param=None, saved_as=None):
        ctx.fmt, ctx.param = fmt, param
        out = fmt.decode(stored, dtype)
        if out is not stored and saved_as is not None:
            # An op saving this upcast (Linear saves its weight) stores the half parameter instead.
            saved_as[id(out)] = (weakref.ref(out), _HalfSaved.of(stored, dtype))
        return out

    def backward(ctx, g):
        accumulate_half_grad(ctx.param, g, ctx.fmt)
        return None


def accumulate_half_grad(param, g, fmt):
    """``param.grad += g``, with ``param.grad`` kept in the half format (rounded once per add)."""
    if param.grad is None:
        param.grad = Tensor.wrap(fmt.encode(g), bucket="gradient")
    else:
        param.grad.data = fmt.encode(fmt.decode(param.grad.data, np.float32) + g)


class _HalfSaved(Tensor):
    """A saved tensor stored in half; remembers the dtype to decode it to."""

    @classmethod
    def of(cls, stored, dtype):
        t = cls.wrap(stored)
        t.compute_dtype = dtype
        return t


def _pack_hooks(fmt, saved_as):
    """pack/unpack for ``saved_tensors_hooks``: float32 saved tensors are stored half, once each."""

    def pack(t):
        a = t.data
        if a.dtype != np.float32:
            return a  # masks, indices, and float16 tensors on a GPU are stored as they are
        hit = saved_as.get(id(a))
        if hit is not None and hit[0]() is a:
            return hit[1]
        packed = _HalfSaved.of(fmt.encode(a), a.dtype)
        saved_as[id(a)] = (weakref.ref(a), packed)
        return packed

    def unpack(packed):
        if isinstance(packed, _HalfSaved):
            # The float32 decode is a temporary of backward: the ledger counts it as workspace.
            return memory.register(fmt.decode(packed.data, packed.compute_dtype))
        return packed

    return pack, unpack


class RoundGrad(Function):
    """Identity forward; backward rounds the gradient to the half format (kept as float32).

    On the CPU, where compute stays float32, this is what makes the gradient flowing between
    modules behave as on a GPU computing in half: values below float16's range underflow to 0
    exactly where a GPU run would lose them. Saves nothing; backward rounds without a 2-byte
    copy (``HalfFormat.round``): one 4-byte temporary and the 4-byte result per value.
    """

    def forward(ctx, a, fmt=None):
        ctx.fmt = fmt
        return a

    def backward(ctx, g):
        return ctx.fmt.round(g)


def _half_forward(module, fmt, dtype, saved_as):
    """``module.forward`` with its own parameters upcast for the call and its outputs'
    gradients rounded to the half format (when the compute dtype is float32)."""
    class_forward = type(module).forward

    def round_grad(t):
        return RoundGrad.apply(t, fmt=fmt) if t.requires_grad and t.dtype == np.float32 else t

    # Looked up once per patch, not per call: a module's parameters do not change while the
    # half context is entered (on a deep model the lookup cost as much as the upcasts).
    originals = [(name, p) for name, p in module.named_parameters(recurse=False) if p is not None]

    def forward(*args, **kwargs):
        for name, p in originals:
            object.__setattr__(module, name,
                               Upcast.apply(p, fmt=fmt, dtype=dtype, param=p, saved_as=saved_as))
        try:
            out = class_forward(module, *args, **kwargs)
        finally:
            for name, p in originals:
                object.__setattr__(module, name, p)
        return _map_tensors(out, round_grad)

    return forward


@contextlib.contextmanager
def _half_modules(root, fmt, dtype, saved_as):
    """Patch the forward of every module that owns parameters or has no children.

    Patches nest: a HalfModule may run inside another one (a checkpointed block of a half model
    re-enters the half context when backward recomputes it), so each forward found is given back.
    """
    patched = [(m, m.__dict__.get("forward")) for m in root.modules() if any(m.named_parameters(recurse=False)) or not m.children()]
    for m, _ in patched:
        object.__setattr__(m, "forward", _half_forward(m, fmt, dtype, saved_as))
    try:
        yield
    finally:
        for m, previous in patched:
            if previous is None:
                del m.__dict__["forward"]
            else:
                object.__setattr__(m, "forward", previous)


def _map_tensors(obj, fn):
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_map_tensors(o, fn) for o in obj)
    if isinstance(obj, dict):
        return {k: _map_tensors(v, fn) for k, v in obj.items()}
    return obj


class HalfModule(Module):
    """A model whose parameters and saved activations are half; returned by :func:`half`.

    Calling it runs the wrapped model with parameters upcast on use (per module) and float32
    saved tensors stored in the half format; floating inputs are cast to the compute dtype and
    floating outputs come back as float32.

    Memory: parameters 2 bytes each; saved activations 2 bytes per float value (masks and
    indices unchanged); during a module's forward, its parameters' upcast (4 bytes each on the
    CPU); during backward, one saved tensor's float32 decode at a time.
    """

    def __init__(self, module, dtype="float16"):
        super().__init__()
        self.module = module
        object.__setattr__(self, "format", get_format(dtype))

    def forward(self, *args, **kwargs):
        params = self.module.parameters()
        device = params[0].device if params else backend.default_device()
        dtype = self.format.compute_dtype(device)

        def to_compute(t):
            return t.to(dtype=dtype) if t.dtype.kind == "f" and t.dtype != dtype else t

        args, kwargs = _map_tensors(args, to_compute), _map_tensors(kwargs, to_compute)
        def half_context():
            # Fresh per entry: the factory outlives the forward (a checkpoint keeps it for its
            # recomputation), and must not keep this forward's half copies alive with it.
            saved_as = {}
            pack, unpack = _pack_hooks(self.format, saved_as)
            stack = contextlib.ExitStack()
            stack.enter_context(saved_tensors_hooks(pack, unpack))
            stack.enter_context(_half_modules(self.module, self.format, dtype, saved_as))
            return stack

        # Registered as a forward context so that a checkpoint inside the model recomputes
        # with the same upcasts and half storage when backward re-runs its forward.
        with forward_context(half_context), half_context():
            out = self.module(*args, **kwargs)
        return _map_tensors(out, lambda t: t.to(dtype="float32") if t.dtype == np.float16 else t)

    def float_state_dict(self):
        """The parameters decoded to float32 (the half values, not the masters)."""
        return {name: backend.to_numpy(self.format.decode(p.data, np.float32))
                for name, p in self.module.named_parameters()}

    def extra_repr(self):
        return f"dtype={self.format.name}"


# -- the optimizer side: fp32 masters ---------------------------------------------------------------
def half(model, optimizer=None, dtype="float16"):
    """Turn a float32 model (and its optimizer) to mixed precision, in place.

    Returns a :class:`HalfModule` (call it instead of ``model``), or ``(HalfModule,
    MasterOptimizer)`` when an optimizer built on ``model.parameters()`` is given (as apex's
    ``amp.initialize``). The fp32 weights move into the optimizer as masters; the model's
    Parameters keep their identity and now hold 2-byte values. Without an optimizer there are
    no masters: use that form for inference only.
    """
    fmt = get_format(dtype)
    if not isinstance(model, Module):
        raise TypeError(f"half() takes a Module, got {type(model).__name__}")
    sparse = [name for name, m in model.named_modules() if getattr(m, "sparse", False) is True]
    if sparse:  # its RowSparse gradient has no half codec, and would fail inside backward
        raise TypeError(f"half() does not support sparse embedding gradients ({', '.join(sparse)}); "
                        "build the embeddings with sparse=False, or keep the model float32")
    params = model.parameters()
    for p in params:
        if p.dtype != np.float32:
            raise TypeError(f"half() expects float32 parameters, found {p.dtype}; "
                            "was the model already converted?")
    wrapped_opt = MasterOptimizer(optimizer, params, fmt) if optimizer is not None else None
    for p in params:
        p.grad = None
        p.data = fmt.encode(p.data)
    wrapper = HalfModule(model, fmt)
    return wrapper if wrapped_opt is None else (wrapper, wrapped_opt)


# -- making underflow and overflow visible -------------------------------------------------------
def _arrays(grads):
    for g in grads:
        if g is None:
            continue
        if isinstance(g, Tensor) and g.requires_grad and g.is_leaf:
            if g.grad is None:
                continue  # a parameter with no gradient (frozen, unused, or before backward)
            g = g.grad
        yield g.data if isinstance(g, Tensor) else g


def fp16_range_report(grads, scale=1.0):
    """What storing ``scale * g`` in float16 does to a set of gradients (fractions of all values).

    ``grads``: arrays or Tensors (a parameter contributes its ``.grad``), any float dtype.
    Returns ``{"count", "zero", "underflow", "subnormal", "overflow", "scale"}``: exact zeros
    already; nonzero values that become 0 (|scale*g| < 2^-25); values that land among the
    subnormals (below 6.1e-5, fewer significant bits); finite values that become inf
    (|scale*g| >= 65520). Computed in float64 so the report itself neither under- nor overflows.
    """
    count = zero = underflow = subnormal = overflow = 0
    for a in _arrays(grads):
        xp = backend.array_module(a)
        a = a.astype(np.float64)
        scaled = a * float(scale)
        with np.errstate(over="ignore", under="ignore"):
            h = scaled.astype(np.float16)
        count += int(a.size)
        zero += int((a == 0).sum())
        underflow += int(((a != 0) & (h == 0)).sum())
        subnormal += int(((h != 0) & (xp.abs(h) < FP16_MIN_NORMAL)).sum())
        overflow += int((xp.isfinite(a) & xp.isinf(h)).sum())
    n = max(count, 1)
    return {"count": count, "zero": zero / n, "underflow": underflow / n, "subnormal": subnormal / n,
            "overflow": overflow / n, "scale": float(scale)}
