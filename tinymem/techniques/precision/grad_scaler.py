"""Loss scaling: ``GradScaler``, with the semantics of ``torch.amp.GradScaler``.

Why: float16's smallest subnormal is 2^-24 (5.96e-8) and its smallest normal 2^-14 (6.10e-5);
gradients below the first become 0 when stored in float16 and lose digits below the second.
Multiplying the loss by a scale S multiplies every gradient by S (backward is linear in the
incoming gradient), lifting small gradients into range; dividing by S in float32 before the
update undoes it exactly (S is a power of two). Too large an S overflows (> 65504 becomes inf).

Dynamic scaling (the defaults) finds S by trial, as PyTorch does::

    a step whose gradients contain inf or NaN is skipped and S *= backoff_factor (0.5);
    after growth_interval (2000) clean steps in a row, S *= growth_factor (2.0).

Static scaling is a fixed S: ``GradScaler(init_scale=1024., growth_factor=1.0,
backoff_factor=1.0)`` never changes S (steps with inf/NaN are still skipped).

The loop, as in PyTorch::

    scaler = GradScaler()
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)                        # optional: to clip true gradients
        clip_grad_norm_(optimizer.master_params(), 1.0)   # or model.parameters() in fp32
        scaler.step(optimizer)                            # skipped if any grad is inf/NaN
        scaler.update()

Contract and pitfalls (PyTorch's):
- ``unscale_`` at most once per optimizer between two ``update`` calls (a second call raises:
  it would divide by S twice); ``step`` unscales itself when you did not.
- ``update`` needs at least one ``step`` (or ``unscale_``) since the last update: the inf check.
- With an optimizer keeping fp32 master weights (:class:`~tinymem.techniques.precision.MasterOptimizer`)
  the half gradients are first copied into fp32 master gradients, then divided by S: dividing
  in float16 would underflow the small gradients again. Unscaling float16 gradients in place
  raises, as in PyTorch.
- ``enabled=False`` makes every method a pass-through, so one loop serves fp32 and fp16.
- About 150 overflowing steps in a row back a float32 scale off from 1.0 to exactly 0, and
  1/S becomes inf. ``unscale_`` multiplies first and checks the product, so such a step is
  skipped; PyTorch 2.13's CPU kernel checks the gradients before multiplying and writes NaN
  into the weights here: the one place where we deliberately differ.

Cost: ``unscale_`` reads the inf/NaN flag on the host once per step (one sync per device, as
PyTorch's ``found_inf.item()``), never once per parameter. On a device each float32 gradient is
unscaled and checked by ONE fused kernel (``UNSCALE``: ``g *= 1/S`` and ``found = 1`` where the
product is not finite, a flag written without a reduction), 8 bytes moved per value.

Memory: no arrays but a 4-byte flag per device and step; the state is a few Python numbers (the
scale is kept as a float32 value, as PyTorch keeps a one-element float32 tensor, so its
arithmetic rounds the same way).
"""
import math
from collections.abc import Mapping

import numpy as np

from ... import backend
from ...autograd import Tensor
from ...checks import is_int, positive_int, real_number
from ...fused import Kernel


def _unscale_body(ops, inv_scale, g, found):
    g = g * inv_scale
    ops.flag_if(found, ~ops.isfinite(g))
    return g, found


UNSCALE = Kernel("grad_unscale", "float32 inv_scale", "float32 g, raw int32 found", _unscale_body, ("inv_scale",))

_READY, _UNSCALED, _STEPPED = "ready", "unscaled", "stepped"
_STATE_KEYS = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")
_ARGUMENTS = ("init_scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def _scale32(name, value):
    """A scale as the float32 it is kept as, refused by ``name`` unless finite and > 0 there."""
    with np.errstate(over="ignore"):
        scale32 = np.float32(real_number(name, value))
    if not (math.isfinite(scale32) and scale32 > 0):
        raise ValueError(f"{name} must be a finite number > 0 that float32 holds (below 3.4e38), got {value!r}")
    return scale32


def _settings(names, scale, growth, backoff, interval, tracker=0):
    """``(scale, growth_factor, backoff_factor, growth_interval, growth_tracker)``, checked and
    converted; ``names`` are the five names an error shows (the constructor's arguments, or a
    state's keys). Nothing is set here: the caller assigns all five once all five have passed.

    Each bad value would stop training silently: a scale of 0, inf or NaN (or one that float32
    rounds to inf or 0) skips every step for good; a growth_factor below 1 (or NaN) shrinks the scale
    when it should grow; a backoff_factor of 0 collapses it at the first overflow; a tracker at
    or past growth_interval never reaches it, so the scale never grows."""
    scale32 = _scale32(names[0], scale)
    if not 1.0 <= real_number(names[1], growth) < math.inf:
        raise ValueError(f"{names[1]} must be a finite number >= 1.0 (1.0 disables growth), got {growth!r}")
    if not 0.0 < real_number(names[2], backoff) <= 1.0:
        raise ValueError(f"{names[2]} must be in (0, 1] (1.0 disables backoff), got {backoff!r}")
    interval = positive_int(names[3], interval)
    if not (is_int(tracker) and 0 <= tracker < interval):
        raise ValueError(f"{names[4]} must be a count of clean steps in [0, growth_interval = {interval}), "
                         f"got {tracker!r}")
    return scale32, float(growth), float(backoff), interval, int(tracker)


def _grads_of(optimizer):
    """The gradient arrays the optimizer will apply, fp32 masters when it keeps them."""
    prepare = getattr(optimizer, "copy_grads_to_masters", None)
    if prepare is not None:
        prepare()
    return [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]


class GradScaler:
    """Dynamic (or static) loss scaling with PyTorch's interface and rules (see the module doc)."""

    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        self._take(_settings(_ARGUMENTS, init_scale, growth_factor, backoff_factor, growth_interval))
        self._enabled = bool(enabled)
        self._per_optimizer = {}

    # -- the four calls of the loop -------------------------------------------------------------
    def scale(self, outputs):
        """``outputs * scale`` (a Tensor, or a list/tuple of them); unchanged when disabled."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        if not isinstance(outputs, Tensor):
            raise TypeError(f"scale() takes a Tensor (the loss) or a list of them, got {type(outputs).__name__}")
        return outputs * float(self._scale)

    def unscale_(self, optimizer):
        """Divide the optimizer's gradients by the scale, in place, and record inf/NaN.

        Call it before touching the true gradients (clipping, logging). Raises if called twice
        for the same optimizer before :meth:`update`, or after :meth:`step`.
        """
        if not self._enabled:
            return
        state = self._state(optimizer)
        if state["stage"] == _UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] == _STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        with np.errstate(divide="ignore"):  # a scale of 0 gives inf, caught below
            inv_scale = np.float32(1.0 / np.float64(self._scale))  # PyTorch: double reciprocal, then float
        # A row-sparse gradient (embedding_bag(sparse=True)) is unscaled and checked through its values.
        grads = [grad.data.values if getattr(grad.data, "is_sparse", False) else grad.data
                 for grad in _grads_of(optimizer)]
        for data in grads:  # all checked before any is divided: a refused call changes nothing
            if data.dtype == np.float16:
                raise ValueError("Attempting to unscale FP16 gradients: unscale fp32 copies instead "
                                 "(use precision.half(model, optimizer) so the optimizer keeps fp32 masters)")
            if data.dtype.kind != "f":
                raise TypeError(f"cannot unscale gradients of dtype {data.dtype}; the optimizer should "
                                "hold float32 parameters (fp32 masters)")
        flags = {}  # one flag per array module; read once, after every gradient is unscaled
        for data in grads:
            xp = backend.array_module(data)
            if xp not in flags:
                flags[xp] = False if xp is np else xp.zeros(1, np.int32)
            # Multiply first, then check (as PyTorch does): a scale that has collapsed to 0
            # makes 1/S infinite, and only the product shows that the step would write inf/NaN.
            if xp is not np and data.dtype == np.float32:
                UNSCALE(inv_scale, data, flags[xp])
                continue
            with np.errstate(over="ignore", invalid="ignore"):
                data *= data.dtype.type(inv_scale)
            finite = xp.isfinite(data).all()
            flags[xp] = (flags[xp] | ~finite) if xp is not np else (flags[xp] or not finite)
        found_inf = any(bool(flag) if xp is np else bool(flag.get()[0]) for xp, flag in flags.items())
        state["found_inf"] = found_inf
        state["stage"] = _UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` unless a gradient is inf/NaN (then the step is skipped).

        Unscales first if :meth:`unscale_` was not called. Returns what ``optimizer.step``
        returns, or ``None`` for a skipped step.
        """
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._state(optimizer)
        if state["stage"] == _STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] == _READY:
            self.unscale_(optimizer)
        result = None
        if not state["found_inf"]:
            result = optimizer.step(*args, **kwargs)
        state["stage"] = _STEPPED
        return result

    def update(self, new_scale=None):
        """Set the scale for the next iteration: ``new_scale`` if given, else the dynamic rule."""
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, Tensor):
                if new_scale.size != 1:
                    raise ValueError("update(new_scale): the scale must be a number or a Tensor of one value, "
                                     f"got a Tensor of shape {tuple(new_scale.shape)}")
                new_scale = new_scale.item()
            # 0 would stop training for good, silently; 1e39 is inf in float32
            self._scale = _scale32("update(new_scale): the scale", new_scale)
        else:
            found = [s["found_inf"] for s in self._per_optimizer.values() if s["found_inf"] is not None]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update(): call "
                                     "scaler.step(optimizer) (or unscale_) before update().")
            if any(found):
                self._scale = np.float32(self._scale * np.float32(self._backoff_factor))
                self._growth_tracker = 0
            else:
                successful = self._growth_tracker + 1
                if successful == self._growth_interval:
                    grown = np.float32(self._scale * np.float32(self._growth_factor))
                    if math.isfinite(grown):
                        self._scale = grown
                    self._growth_tracker = 0
                else:
                    self._growth_tracker = successful
        self._per_optimizer = {}

    # -- queries and state ----------------------------------------------------------------------
    def get_scale(self):
        """The current scale as a Python float (1.0 when disabled)."""
        return float(self._scale) if self._enabled else 1.0

    def get_growth_factor(self):
        return self._growth_factor

    def get_backoff_factor(self):
        return self._backoff_factor

    def get_growth_interval(self):
        return self._growth_interval

    def is_enabled(self):
        return self._enabled

    def found_inf(self, optimizer):
        """Whether the last unscale_/step of ``optimizer`` saw an inf or NaN (None: not yet)."""
        return self._per_optimizer.get(id(optimizer), {}).get("found_inf")

    def state_dict(self):
        """``{"scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker"}``
        (empty when disabled), as PyTorch's."""
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._growth_tracker}

    def load_state_dict(self, state_dict):
        """Restore what :meth:`state_dict` returned. Every field is checked as the constructor
        checks its argument (and ``_growth_tracker`` is a count in [0, growth_interval)) before
        any is set: a refused state leaves this scaler as it was."""
        if not self._enabled:
            return
        if not isinstance(state_dict, Mapping):
            raise TypeError("load_state_dict takes the dict that GradScaler.state_dict() returned, got "
                            f"{type(state_dict).__name__}")
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved "
                               "from a disabled instance of GradScaler.")
        missing = [key for key in _STATE_KEYS if key not in state_dict]
        if missing:
            raise ValueError(f"load_state_dict: the state lacks {missing} (it has {sorted(map(str, state_dict))}); "
                             "pass the dict that GradScaler.state_dict() returned")
        self._take(_settings([f"load_state_dict: {key}" for key in _STATE_KEYS],
                             *(state_dict[key] for key in _STATE_KEYS)))

    def _take(self, settings):
        """Set the five settings that :func:`_settings` checked (all of them or none)."""
        scale, growth, backoff, interval, tracker = settings
        self._scale = scale
        self._growth_factor = growth
        self._backoff_factor = backoff
        self._growth_interval = interval
        self._growth_tracker = tracker

    def _state(self, optimizer):
        if not hasattr(optimizer, "param_groups"):  # None, or the model passed by mistake
            raise TypeError(f"GradScaler takes the optimizer, got {type(optimizer).__name__}; "
                            "call scaler.step(optimizer) / scaler.unscale_(optimizer)")
        return self._per_optimizer.setdefault(id(optimizer), {"stage": _READY, "found_inf": None})
