"""LoRA (Hu et al. 2021): freeze a Linear, train a rank-r correction beside it.

    y = base(x) + (alpha / r) · dropout(x) A^T B^T        A: (r, in), B: (out, r)

Contract:
- The base layer's weight and bias are frozen (``requires_grad=False``): backward computes no
  gradient for them and an optimizer given ``model.parameters()`` keeps no state for them (it
  skips parameters whose ``grad`` is None). Only A and B train.
- A starts as a Linear's weight does, U(-1/sqrt(in), 1/sqrt(in)); B starts at zero, so a freshly
  wrapped model computes exactly what the base model did, to the last bit.
- ``merge()`` folds ``(alpha / r) · B A`` into the base weight (inference then costs what the
  base layer costs); ``unmerge()`` takes it back out. Both round in the weight's dtype, so merged
  and unmerged outputs agree to that rounding, not bit for bit. A merged layer does not train.
  The flag is saved in the state_dict (``merged``), so a merged state loads as merged; a state
  saved without it (before the flag existed) loads as not merged.
- A and B are stored in the base weight's float dtype (float32 for an NF4 base), as PEFT does:
  a float16 model stays float16 after the layer (an NF4 base's float32 adapters compute in
  float32 and their output is cast to the input's dtype, as PEFT casts it).
- Dropout acts on the adapter's input only; the base path sees ``x`` unchanged.

Memory for a Linear (in, out) in float32 with Adam: the frozen weight stays 4·in·out bytes of
``parameter`` with no gradient and no optimizer state; the adapters add 4·r·(in + out) bytes of
``parameter``, as many of ``gradient`` and twice as many of ``optimizer``. The adapter path
saves its input x (the frozen base keeps only its weight, for the input's gradient) and the
(…, r) projection ``x A^T``: 4·(in + r) bytes per token of ``activation``, as the base Linear
alone would keep 4·in when it trains. Time: two thin matmuls beside the base one, about 2r/out extra.
"""
import fnmatch
import math

import numpy as np

from ... import backend
from ... import functional as F
from ...autograd import no_grad
from ...checks import dropout_probability, positive_int, real_number
from ...nn import Linear, Module, Parameter
from ...nn.init import uniform


class LoRALinear(Module):
    """A frozen ``base`` layer (a Linear, or :class:`~.qlinear.NF4Linear`) plus trainable A, B.

    A and B take the base weight's float dtype (an NF4 base computes in float32), as PEFT gives
    new adapters its base layer's dtype: a float16 model stays float16 after the layer."""

    def __init__(self, base, r, alpha=None, dropout=0.0):
        super().__init__()
        check_base("LoRALinear", base)
        r, alpha, dropout = check_options("LoRALinear", r, alpha, dropout)
        self.r, self.alpha = r, float(r if alpha is None else alpha)
        self.scaling = self.alpha / r
        self.dropout, self.merged = dropout, False
        for p in base.parameters():
            p.requires_grad = False
        self.base = base
        device, dtype = base_device(base), base_dtype(base)
        a = uniform((r, base.in_features), 1.0 / np.sqrt(base.in_features), device)
        self.lora_A = a if a.dtype == dtype else Parameter(a.data.astype(dtype))
        xp = backend.array_module(device)
        self.lora_B = Parameter(xp.zeros((base.out_features, r), dtype))

    @property
    def in_features(self):
        return self.base.in_features

    @property
    def out_features(self):
        return self.base.out_features

    def forward(self, x):
        y = self.base(x)
        if self.merged:
            return y
        h = F.dropout(x, self.dropout, self.training)
        delta = F.linear(F.linear(h, self.lora_A), self.lora_B) * self.scaling
        if delta.dtype != y.dtype:  # float32 adapters of a float16 NF4 model: back to its dtype, as PEFT does
            delta = delta.to(dtype=y.dtype)
        return y + delta

    def delta_weight(self):
        """``(alpha / r) · B A`` as an array of the base weight's shape (out, in): 4·in·out bytes."""
        delta = self.lora_B.data @ self.lora_A.data
        # alpha / r rounded to float32 or the weight's dtype, the wider: float64 adapters keep it
        # to float64 (rounded to float32 it moved a float64 layer's merged output by 2e-8), and a
        # float16 product is scaled in float32 and rounded once, as before.
        delta *= np.promote_types(delta.dtype, np.float32).type(self.scaling)
        return delta

    def merge(self):
        """Fold the adapters into the base weight in place; forward then skips the adapter path."""
        if self.merged:
            raise RuntimeError("LoRALinear.merge: the adapters are already merged; unmerge() first")
        if not isinstance(self.base, Linear):
            raise TypeError(f"merge() needs a float Linear base; a {type(self.base).__name__} would have to be "
                            "re-quantized, losing the adapter's small update to rounding")
        with no_grad():
            self.base.weight.data += self.delta_weight()
        self.merged = True
        return self

    def unmerge(self):
        """Subtract the adapters back out of the base weight (after :meth:`merge`)."""
        if not self.merged:
            raise RuntimeError("LoRALinear.unmerge: the adapters are not merged")
        with no_grad():
            self.base.weight.data -= self.delta_weight()
        self.merged = False
        return self

    def _extra_state(self):
        # Saved with the weights: a merged model's base already holds the update, so a model
        # loading that state must skip the adapter path (or it would add the update twice).
        return {"merged": np.array(self.merged)}

    def _extra_state_defaults(self):
        # A state saved before the flag existed loads as not merged: what loading did then.
        return {"merged": np.array(False)}

    def _check_extra_state(self, key, name, value):
        value = np.asarray(value)
        if value.dtype != bool and not (value.dtype.kind in "iu" and value in (0, 1)):
            raise ValueError(f"load_state_dict: {key} must be True or False (whether the base weight already "
                             f"holds the adapters' update), got {value!r}")
        if bool(value) and not isinstance(self.base, Linear):  # merge() refuses it: loading must too
            raise ValueError(f"load_state_dict: {key} is True, but this layer's base is a {type(self.base).__name__}, "
                             "which cannot hold a merged update; the state was saved from a float Linear model")

    def _load_extra_state(self, name, value):
        self.merged = bool(value)

    def extra_repr(self):
        return f"r={self.r}, alpha={self.alpha:g}, dropout={self.dropout}, merged={self.merged}"


def check_base(who, base):
    """Refuse a ``base`` that a LoRALinear cannot wrap (before anything is frozen or replaced)."""
    if not isinstance(base, Module) or not hasattr(base, "in_features") or not hasattr(base, "out_features"):
        raise TypeError(f"{who} wraps a Linear (or an NF4Linear), got a {type(base).__name__}")
    if isinstance(base, LoRALinear):
        raise TypeError(f"{who}: the base already is a LoRALinear; one adapter per layer (train it, "
                        "or merge() it and wrap the merged base Linear)")


def base_device(layer):
    """The device of a layer's first parameter or stored array."""
    for p in layer.parameters():
        return p.device
    return backend.device_of(layer.stored_weight())


def base_dtype(layer):
    """The dtype the adapters of ``layer`` compute in: its weight's, when that is a float."""
    weight = getattr(layer, "weight", None)
    return weight.dtype if weight is not None and weight.dtype.kind == "f" else np.dtype(np.float32)


def check_options(who, r, alpha, dropout):
    """``(r, alpha, dropout)`` checked, before anything is changed: a positive integer rank, a
    finite alpha (or None: alpha = r) and a dropout probability in [0, 1)."""
    r = positive_int(f"{who}: r (the adapter's rank)", r)
    if alpha is not None and not math.isfinite(real_number(f"{who}: alpha", alpha)):
        raise ValueError(f"{who}: alpha must be a finite number (the update is scaled by alpha / r), got {alpha!r}")
    return r, alpha, dropout_probability(f"{who}: dropout (a probability, e.g. 0.1)", dropout)


def lora_modules(model):
    """``(name, LoRALinear)`` for every adapter in ``model``."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]


def apply_lora(model, r, alpha=None, targets=("*",), dropout=0.0, wrap=None):
    """Replace every Linear of ``model`` whose dotted name matches one of ``targets`` (shell
    patterns, e.g. ``"*.mlp.*"``) by a :class:`LoRALinear`, in place, and freeze every other
    parameter of the model (embeddings, norms, the raw attention projection) except existing
    adapters: after it, only the adapters train. ``wrap(linear)`` may turn each Linear into
    another frozen base first (QLoRA passes ``NF4Linear.from_linear``). Returns ``model``.

    - A Linear that already is an adapter's base is skipped, as PEFT never wraps a LoRA layer's
      base layer again: a second call adapts only new layers and leaves the first adapters
      training. A call that matches only adapted layers is refused.
    - A Linear used in several places (a shared layer) gets one LoRALinear, put in each place:
      one adapter pair, merged once. All its places must match ``targets``, or none.
    - Everything is checked before anything changes: a refused call leaves the model as it was.

    Memory: see :class:`LoRALinear`; the replaced Linears' weights are kept (not copied) unless
    ``wrap`` makes a smaller base, in which case the float weight is freed."""
    if not isinstance(model, Module):
        raise TypeError(f"apply_lora works on an nn.Module, got a {type(model).__name__}")
    if type(model) is Linear or isinstance(model, LoRALinear):
        raise TypeError(f"apply_lora replaces the Linears inside a model, in place; a bare {type(model).__name__} "
                        "has no parent to hold its adapter: use LoRALinear(linear, r) instead, or put it in a model "
                        "(nn.Sequential(linear))")
    targets = _checked_targets(targets)
    r, alpha, dropout = check_options("apply_lora", r, alpha, dropout)
    if wrap is not None and not callable(wrap):
        raise TypeError(f"apply_lora: wrap must be a function of a Linear, got a {type(wrap).__name__}")
    places, adapted = _places(model, targets)
    chosen = [(linear, slots) for linear, slots in places.values() if any(match for *_, match in slots)]
    if not chosen:
        names = [n for n, m in model.named_modules() if type(m) is Linear]
        already = f"; these already carry adapters (skipped: one adapter per layer): {adapted}" if adapted else ""
        raise ValueError(f"apply_lora: no Linear matches targets {list(targets)}; the model's "
                         f"Linears are {names or 'none'}{already}")
    for _, slots in chosen:
        if not all(match for *_, match in slots):
            raise ValueError(f"apply_lora: one Linear is shared by {[name for _, _, name, _ in slots]}, and targets "
                             f"{list(targets)} match only some of them: adapting it in one place would change "
                             "the others; match all or none")
    bases = [(wrap(linear) if wrap is not None else linear, slots) for linear, slots in chosen]
    for base, _ in bases:
        check_base("apply_lora: wrap(linear) returned something LoRALinear cannot wrap; LoRALinear", base)
    keep = {id(p) for _, m in lora_modules(model) for p in (m.lora_A, m.lora_B)}
    for p in model.parameters():
        if id(p) not in keep:
            p.requires_grad = False
    for base, slots in bases:
        adapter = LoRALinear(base, r, alpha, dropout)
        for parent, child_name, _, _ in slots:
            parent.replace_child(child_name, adapter)
    return model


def _checked_targets(targets):
    if isinstance(targets, str):
        targets = (targets,)
    try:
        targets = tuple(targets)
    except TypeError:
        targets = None
    if not targets or not all(isinstance(t, str) for t in targets):
        raise TypeError(f"apply_lora: targets must be a shell pattern of dotted Linear names, or a list of them "
                        f"(e.g. '*' for every Linear, ['*.q', '*.v']), got {targets!r}")
    return targets


def _places(model, targets):
    """``{id(linear): (linear, [(parent, child name, dotted name, matches targets)])}`` for every
    Linear that is not an adapter's base, and the names of the adapters already there."""
    places, adapted = {}, []
    for parent_name, parent in model.named_modules():
        if isinstance(parent, LoRALinear):
            adapted.append(parent_name)
            continue
        for child_name, child in parent.named_children():
            if type(child) is Linear:
                name = f"{parent_name}.{child_name}" if parent_name else child_name
                match = any(fnmatch.fnmatchcase(name, t) for t in targets)
                places.setdefault(id(child), (child, []))[1].append((parent, child_name, name, match))
    return places, adapted


def trainable_parameters(model):
    """The parameters that still require a gradient (after :func:`apply_lora`: the adapters)."""
    return [p for p in model.parameters() if p.requires_grad]
