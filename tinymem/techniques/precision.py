"""Mixed-precision training: half-precision storage with fp32 master weights and loss scaling.

The recipe of Micikevicius et al. (2018), "Mixed Precision Training":

1. **Store half.** Parameters, the activations saved for backward and the parameter gradients
   are held in float16 or bfloat16: 2 bytes per value instead of 4.
2. **Keep fp32 masters.** The optimizer updates an fp32 copy of every weight (4 bytes per
   parameter, counted in the ``optimizer`` bucket: it is optimizer-side state, as in ZeRO's
   accounting) and the result is rounded back into the half weights. Updating the half weights
   directly would lose every update smaller than half an ulp: in float16, 1.0 + 1e-4 == 1.0.
3. **Scale the loss** (float16 only; :class:`GradScaler`) so small gradients do not underflow.

Memory per parameter with Adam: fp32 training 4 (weight) + 4 (grad) + 8 (Adam) = 16 bytes;
mixed precision 2 (half weight) + 2 (half grad) + 4 (master) + 8 (Adam) = 16 bytes, plus 4
bytes of fp32 master gradients alive during the optimizer step. The weights do not get cheaper:
**the saving is in the activations**, 2 bytes per saved value instead of 4, so mixed precision
pays off for activation-dominated training (large batches, long sequences) and approaches
0.5x there.

Where the arithmetic happens (say it plainly):
- **CPU (NumPy): compute stays float32.** NumPy has no fp16 matrix multiply (an fp16 matmul
  runs about 170x slower than fp32 here), so each half array is upcast when an op uses it and
  its result is stored half again. On the CPU mixed precision saves memory, not time; the
  upcasts cost a little time.
- **GPU (CuPy), float16: compute in float16** (cuBLAS accumulates fp16 matmuls in fp32), as on
  tensor cores. **bfloat16 on CuPy** is still upcast to float32 for compute: CuPy has no
  bfloat16 dtype, so tinymem stores it as uint16 bits (see :mod:`.bfloat16`).
- Model outputs come back as float32 so the loss (softmax, log) runs in float32, as autocast does.
- Because the CPU computes in fp32, values are rounded to half where a GPU would hold them in
  half: saved activations, parameters, parameter gradients, and the gradients passed between
  modules (rounded, not stored, so that underflow happens as it would on the GPU).

The user API (like apex's ``amp.initialize``, with PyTorch names)::

    model = models.MLP([64, 256, 10])
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    model, optimizer = precision.half(model, optimizer, dtype="float16")   # or "bfloat16"
    scaler = precision.GradScaler()              # bfloat16 needs none: GradScaler(enabled=False)
    for x, y in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()

How it plugs into the engine (DESIGN.md's "parameter storage" seam, with no engine change):
- :class:`HalfModule` runs the wrapped model under ``saved_tensors_hooks`` that store every
  float32 tensor saved for backward in half (a tensor saved twice, such as a ReLU output that
  the next Linear saves again, is stored once), and substitutes each module's parameters by
  their upcast only while that module's ``forward`` runs (one layer's fp32 weights alive at a
  time, 4 bytes per parameter of that layer, as workspace).
- The upcast is a ``Function`` (:class:`Upcast`) whose backward rounds the incoming gradient to
  the half format and accumulates it into ``param.grad`` itself (a bfloat16 gradient is uint16
  bits, which the engine could not add).
- On the CPU, the gradient leaving each module's output is rounded to the half format
  (:class:`RoundGrad`), so the backward pass loses what a GPU computing in half would lose:
  a gradient below 2^-25 becomes 0 between layers, which is what loss scaling prevents.
- :class:`MasterOptimizer` wraps the optimizer: its ``param_groups`` hold the fp32 masters;
  ``step()`` copies the half gradients into fp32 master gradients, runs the wrapped optimizer,
  and rounds the masters back into the half parameters in place.

Pitfalls:
- The wrapped model's parameters *are* half now (bfloat16 ones are uint16 bits): call the
  model through the returned :class:`HalfModule`, and save weights with
  ``optimizer.state_dict()`` (fp32 masters) rather than the model's half ones.
- A parameter read from *another* module's forward (weight tying done by reaching into a
  sibling's attribute) is not upcast; assign the shared Parameter to both modules instead.
- Clip gradients after ``scaler.unscale_(optimizer)`` on ``optimizer.master_params()``: the
  half gradients on the model are still scaled.
"""
import contextlib
import weakref

import numpy as np

from .. import backend, memory
from ..autograd import Function, Tensor, forward_context, saved_tensors_hooks
from ..nn import Module
from .bfloat16 import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from .grad_scaler import GradScaler

__all__ = ["half", "HalfModule", "MasterOptimizer", "GradScaler", "Upcast", "RoundGrad", "fp16_range_report",
           "FP16_MIN_SUBNORMAL", "FP16_MIN_NORMAL", "FP16_MAX", "float32_to_bfloat16_bits",
           "bfloat16_bits_to_float32"]

FP16_MIN_SUBNORMAL = 2.0 ** -24   # 5.96e-8: below half of it, a value rounds to 0
FP16_MIN_NORMAL = 2.0 ** -14      # 6.10e-5: below it, fewer than 11 bits of precision are left
FP16_MAX = 65504.0                # above 65520 a value rounds to inf


class HalfFormat:
    """A 2-byte storage format: ``encode`` float32 -> storage, ``decode`` storage -> float."""

    def __init__(self, name, storage_dtype):
        self.name, self.storage_dtype = name, np.dtype(storage_dtype)

    def encode(self, x):
        if self.name == "bfloat16":
            return float32_to_bfloat16_bits(x)
        with np.errstate(over="ignore", under="ignore"):  # overflow to inf is the point here
            return x.astype(np.float16)

    def decode(self, stored, dtype=np.float32):
        """The values as ``dtype``; a float16 array asked for as float16 is returned as is."""
        if self.name == "bfloat16":
            out = bfloat16_bits_to_float32(stored)
            return out if dtype == np.float32 else out.astype(dtype)
        return stored if stored.dtype == dtype else stored.astype(dtype)

    def compute_dtype(self, device):
        """float16 compute on a GPU for float16; float32 everywhere else (see the module doc)."""
        return np.dtype(np.float16) if (self.name == "float16" and device == "cuda") else np.dtype(np.float32)

    def __repr__(self):
        return self.name


FORMATS = {"float16": HalfFormat("float16", np.float16), "bfloat16": HalfFormat("bfloat16", np.uint16)}
_ALIASES = {"float16": "float16", "fp16": "float16", "half": "float16",
            "bfloat16": "bfloat16", "bf16": "bfloat16"}


def get_format(dtype):
    """The :class:`HalfFormat` for ``"float16"`` / ``"bfloat16"`` (aliases fp16, half, bf16)."""
    if isinstance(dtype, HalfFormat):
        return dtype
    name = _ALIASES.get(str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype)
    if name is None:
        raise ValueError(f"unknown half-precision dtype {dtype!r}; choose 'float16' or 'bfloat16'")
    return FORMATS[name]


# -- parameters: upcast on use, gradient stored half ----------------------------------------------
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
        param.grad = Tensor._wrap(fmt.encode(g), bucket="gradient")
    else:
        param.grad.data = fmt.encode(fmt.decode(param.grad.data, np.float32) + g)


class _HalfSaved(Tensor):
    """A saved tensor stored in half; remembers the dtype to decode it to."""

    @classmethod
    def of(cls, stored, dtype):
        t = cls._wrap(stored)
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
    exactly where a GPU run would lose them. Saves nothing; backward makes one 2-byte and one
    4-byte temporary of the gradient's size.
    """

    def forward(ctx, a, fmt=None):
        ctx.fmt = fmt
        return a

    def backward(ctx, g):
        return ctx.fmt.decode(ctx.fmt.encode(g), g.dtype)


def _half_forward(module, fmt, dtype, saved_as):
    """``module.forward`` with its own parameters upcast for the call and its outputs'
    gradients rounded to the half format (when the compute dtype is float32)."""
    class_forward = type(module).forward

    def round_grad(t):
        return RoundGrad.apply(t, fmt=fmt) if t.requires_grad and t.dtype == np.float32 else t

    def forward(*args, **kwargs):
        originals = dict(module._parameters)
        for name, p in originals.items():
            if p is not None:
                object.__setattr__(module, name,
                                   Upcast.apply(p, fmt=fmt, dtype=dtype, param=p, saved_as=saved_as))
        try:
            out = class_forward(module, *args, **kwargs)
        finally:
            for name, p in originals.items():
                object.__setattr__(module, name, p)
        return _map_tensors(out, round_grad)

    return forward


@contextlib.contextmanager
def _half_modules(root, fmt, dtype, saved_as):
    """Patch the forward of every module that owns parameters or has no children.

    Patches nest: a HalfModule may run inside another one (a checkpointed block of a half model
    re-enters the half context when backward recomputes it), so each forward found is given back.
    """
    patched = [(m, m.__dict__.get("forward")) for m in root.modules() if m._parameters or not m._modules]
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
        saved_as = {}
        pack, unpack = _pack_hooks(self.format, saved_as)

        def half_context():
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
class MasterOptimizer:
    """An optimizer whose parameters are fp32 master copies of a half model's weights.

    ``step()``: (1) master.grad = float32(half grad) for each parameter (4 bytes per parameter,
    alive until the step ends); (2) the wrapped optimizer updates the masters; (3) each master
    is rounded into its half parameter in place. ``param_groups`` and ``state`` are the wrapped
    optimizer's (learning-rate schedules work unchanged); the masters live in the ``optimizer``
    bucket.
    """

    def __init__(self, optimizer, model_params, fmt):
        self.optimizer, self.format = optimizer, get_format(fmt)
        by_id = {id(p): p for p in model_params}
        self.pairs = []
        self._sources = []
        master_of = {}
        for group in optimizer.param_groups:
            masters = []
            for p in group["params"]:
                if id(p) not in by_id:
                    raise ValueError("the optimizer holds a tensor that is not a parameter of the model; "
                                     "build the optimizer on model.parameters() before half()")
                if p.dtype != np.float32:
                    raise TypeError(f"half() needs a float32 model to make fp32 masters from, got a "
                                    f"{p.dtype} parameter (was half() already applied?)")
                master = Tensor._wrap(p.data.copy(), requires_grad=True, bucket="optimizer")
                master_of[p] = master
                masters.append(master)
                self.pairs.append((p, master))
                self._sources.append(None)
            group["params"] = masters
        optimizer.state = {master_of.get(p, p): s for p, s in optimizer.state.items()}

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    @property
    def state(self):
        return self.optimizer.state

    def master_params(self):
        """The fp32 master tensors, in parameter order (clip these after ``unscale_``)."""
        return [m for _, m in self.pairs]

    def copy_grads_to_masters(self):
        """master.grad = float32(param.grad) for every half gradient not copied yet.

        :class:`GradScaler` calls this before unscaling, so the division by the scale happens
        in float32. A gradient already copied (same half array) is not copied again.
        """
        for i, (p, master) in enumerate(self.pairs):
            if p.grad is None:
                continue
            source = self._sources[i]
            if source is not None and source() is p.grad.data and master.grad is not None:
                continue
            # Decoding a 2-byte array always makes a new float32 array: the master grad owns it.
            master.grad = Tensor._wrap(self.format.decode(p.grad.data, np.float32), bucket="gradient")
            self._sources[i] = weakref.ref(p.grad.data)

    def step(self):
        """Update the fp32 masters from the half gradients and round them into the model."""
        self.copy_grads_to_masters()
        result = self.optimizer.step()
        for i, (p, master) in enumerate(self.pairs):
            if master.grad is not None:
                p.data[...] = self.format.encode(master.data)
            master.grad = None
            self._sources[i] = None
        return result

    def zero_grad(self, set_to_none=True):
        for i, (p, master) in enumerate(self.pairs):
            master.grad = None
            self._sources[i] = None
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.data[...] = 0  # zero bits are 0.0 in float16 and bfloat16 alike

    def state_bytes(self):
        """Bytes of optimizer-side state: the wrapped optimizer's plus the fp32 masters."""
        return self.optimizer.state_bytes() + sum(m.nbytes for m in self.master_params())

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(), "dtype": self.format.name,
                "master_params": [m.numpy().copy() for m in self.master_params()]}

    def load_state_dict(self, state_dict):
        if state_dict.get("dtype") != self.format.name:
            raise ValueError(f"state dict was saved from a {state_dict.get('dtype')} MasterOptimizer, "
                             f"this one is {self.format.name}")
        saved = state_dict["master_params"]
        if len(saved) != len(self.pairs):
            raise ValueError(f"state dict has {len(saved)} master tensors, this optimizer {len(self.pairs)}")
        self.optimizer.load_state_dict(state_dict["optimizer"])
        for (p, master), value in zip(self.pairs, saved):
            if tuple(value.shape) != master.shape:
                raise ValueError(f"master of shape {value.shape} for a parameter of shape {master.shape}")
            master.data[...] = backend.to_device(np.asarray(value, np.float32), master.device)
            p.data[...] = self.format.encode(master.data)


def half(model, optimizer=None, dtype="float16"):
    """Turn a float32 model (and its optimizer) to mixed precision, in place.

    Returns a :class:`HalfModule` (call it instead of ``model``), or ``(HalfModule,
    MasterOptimizer)`` when an optimizer built on ``model.parameters()`` is given (as apex's
    ``amp.initialize``). The fp32 weights move into the optimizer as masters; the model's
    Parameters keep their identity and now hold 2-byte values. Without an optimizer there are
    no masters: use that form for inference only.
    """
    fmt = get_format(dtype)
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
        if isinstance(g, Tensor) and g.requires_grad and g.is_leaf and g.grad is not None:
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
