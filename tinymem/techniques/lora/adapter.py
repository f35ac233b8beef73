"""LoRA (Hu et al. 2021): freeze a Linear, train a rank-r correction beside it.

    y = base(x) + (alpha / r) · dropout(x) A^T B^T        A: (r, in), B: (out, r)

Contract:
- The base layer's weight and bias are frozen (``requires_grad=False``): backward computes no
  gradient for them and an optimizer given ``model.parameters()`` keeps no state for them (it
  skips parameters whose ``grad`` is None). Only A and B train.
- A starts as a Linear's weight does, U(-1/sqrt(in), 1/sqrt(in)); B starts at zero, so a freshly
  wrapped model computes exactly what the base model did, to the last bit.
- ``merge()`` folds ``(alpha / r) · B A`` into the base weight (inference then costs what the
  base layer costs); ``unmerge()`` takes it back out. Both round in float32, so merged and
  unmerged outputs agree to float32 rounding, not bit for bit. A merged layer does not train.
- Dropout acts on the adapter's input only; the base path sees ``x`` unchanged.

Memory for a Linear (in, out) in float32 with Adam: the frozen weight stays 4·in·out bytes of
``parameter`` with no gradient and no optimizer state; the adapters add 4·r·(in + out) bytes of
``parameter``, as many of ``gradient`` and twice as many of ``optimizer``. The adapter path
saves its input x (the frozen base keeps only its weight, for the input's gradient) and the
(…, r) projection ``x A^T``: 4·(in + r) bytes per token of ``activation``, as the base Linear
alone would keep 4·in when it trains. Time: two thin matmuls beside the base one, about 2r/out extra.
"""
import fnmatch

import numpy as np

from ... import backend
from ... import functional as F
from ...autograd import no_grad
from ...checks import positive_int
from ...nn import Linear, Module, Parameter
from ...nn.init import uniform


class LoRALinear(Module):
    """A frozen ``base`` layer (a Linear, or :class:`~.qlinear.NF4Linear`) plus trainable A, B."""

    def __init__(self, base, r, alpha=None, dropout=0.0):
        super().__init__()
        if not hasattr(base, "in_features") or not hasattr(base, "out_features"):
            raise TypeError(f"LoRALinear wraps a Linear (or an NF4Linear), got a {type(base).__name__}")
        positive_int("LoRALinear: r (the adapter's rank)", r)
        if not 0 <= dropout < 1:
            raise ValueError(f"LoRALinear: dropout must be in [0, 1), got {dropout}")
        self.r, self.alpha = r, float(r if alpha is None else alpha)
        self.scaling = self.alpha / r
        self.dropout, self.merged = dropout, False
        for p in base.parameters():
            p.requires_grad = False
        self.base = base
        device = base_device(base)
        self.lora_A = uniform((r, base.in_features), 1.0 / np.sqrt(base.in_features), device)
        xp = backend.array_module(device)
        self.lora_B = Parameter(xp.zeros((base.out_features, r), np.float32))

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
        return y + F.linear(F.linear(h, self.lora_A), self.lora_B) * self.scaling

    def delta_weight(self):
        """``(alpha / r) · B A`` as an array of the base weight's shape (out, in): 4·in·out bytes."""
        delta = self.lora_B.data @ self.lora_A.data
        delta *= np.float32(self.scaling)
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

    def extra_repr(self):
        return f"r={self.r}, alpha={self.alpha:g}, dropout={self.dropout}, merged={self.merged}"


def base_device(layer):
    """The device of a layer's first parameter or stored array."""
    for p in layer.parameters():
        return p.device
    return backend.device_of(layer.stored_weight())


def lora_modules(model):
    """``(name, LoRALinear)`` for every adapter in ``model``."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, LoRALinear)]


def apply_lora(model, r, alpha=None, targets=("*",), dropout=0.0, wrap=None):
    """Replace every Linear of ``model`` whose dotted name matches one of ``targets`` (shell
    patterns, e.g. ``"*.mlp.*"``) by a :class:`LoRALinear`, in place, and freeze every other
    parameter of the model (embeddings, norms, the raw attention projection): after it, only the
    adapters train. ``wrap(linear)`` may turn each Linear into another frozen base first (QLoRA
    passes ``NF4Linear.from_linear``). Returns ``model``.

    Memory: see :class:`LoRALinear`; the replaced Linears' weights are kept (not copied) unless
    ``wrap`` makes a smaller base, in which case the float weight is freed."""
    if not isinstance(model, Module):
        raise TypeError(f"apply_lora works on an nn.Module, got a {type(model).__name__}")
    if isinstance(targets, str):
        targets = (targets,)
    chosen = [(parent, child_name, child)
              for parent_name, parent in list(model.named_modules())
              for child_name, child in list(parent.named_children())
              if type(child) is Linear and any(fnmatch.fnmatchcase(
                  f"{parent_name}.{child_name}" if parent_name else child_name, t) for t in targets)]
    if not chosen:
        names = [n for n, m in model.named_modules() if type(m) is Linear]
        raise ValueError(f"apply_lora: no Linear matches targets {list(targets)}; the model's Linears are "
                         f"{names or 'none'}")
    for p in model.parameters():
        p.requires_grad = False
    for parent, name, child in chosen:
        base = wrap(child) if wrap is not None else child
        parent.replace_child(name, LoRALinear(base, r, alpha, dropout))
    return model


def trainable_parameters(model):
    """The parameters that still require a gradient (after :func:`apply_lora`: the adapters)."""
    return [p for p in model.parameters() if p.requires_grad]
