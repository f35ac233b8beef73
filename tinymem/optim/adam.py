"""Adam (Kingma and Ba, 2015), as ``torch.optim.Adam`` computes it (AdamW in ``adamw.py``).

    g = grad + weight_decay * p          (L2 penalty; decoupled_weight_decay: p *= 1 - lr * wd)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g^2
    v_max = max(v_max, v)                (amsgrad only; the denominator then uses v_max)
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

State: two buffers the size of the parameter, 8 bytes per float32 parameter (12 with amsgrad),
plus a step count (a Python int). :meth:`Adam._direction` is the arithmetic on its own, shared
with GaLore (moments of a projected gradient) and Adam8bit (moments dequantized for one step).

Time: on the CPU, 13 in-place passes over the parameter's size with two workspace temporaries
(8 bytes per parameter). On a device a float32 parameter steps in ONE fused kernel (``ADAM``,
``tinymem.fused``): p, g, m, v read once and p, m, v written once, 28 bytes per parameter
(32 with amsgrad) and no temporary, where the 13 ufuncs moved about 116. The kernel's body is
the same formula in the same order of float32 operations (a GPU may contract a multiply and an
add into one rounding: the last bit can differ from the CPU's).
"""
import math

import numpy as np

from .. import backend
from ..fused import Kernel
from .optimizer import Optimizer


def _adam_body(amsgrad):
    def body(ops, g, wd, decay, beta1, beta2, one_minus_beta1, one_minus_beta2, bias2_sqrt, step_size, eps,
             p, m, v, *v_max):
        g = g + wd * p  # L2 penalty (wd = 0 when decoupled: then decay = 1 - lr * wd shrinks p)
        m = m * beta1 + g * one_minus_beta1
        v = v * beta2 + g * g * one_minus_beta2
        second = ops.maximum(v_max[0], v) if amsgrad else v
        update = m / (ops.sqrt(second) / bias2_sqrt + eps) * step_size
        return (p * decay - update, m, v) + ((second,) if amsgrad else ())
    return body


_SCALARS = ("wd", "decay", "beta1", "beta2", "one_minus_beta1", "one_minus_beta2", "bias2_sqrt", "step_size", "eps")
_INPUTS = "float32 g, " + ", ".join(f"float32 {name}" for name in _SCALARS)
ADAM = Kernel("adam_step", _INPUTS, "float32 p, float32 m, float32 v", _adam_body(False), _SCALARS)
ADAM_AMSGRAD = Kernel("adam_amsgrad_step", _INPUTS, "float32 p, float32 m, float32 v, float32 v_max",
                      _adam_body(True), _SCALARS)


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 amsgrad=False, decoupled_weight_decay=False):
        if eps < 0 or weight_decay < 0:
            raise ValueError(f"eps ({eps}) and weight_decay ({weight_decay}) must be >= 0")
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, decoupled_weight_decay=decoupled_weight_decay)

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter of ``shape``: 2 (3 with amsgrad) full-size buffers."""
        return (3 if group.get("amsgrad") else 2) * math.prod(shape) * itemsize

    def _decay(self, p, grad, group):
        """Apply weight decay: coupled (added to the gradient) or decoupled (shrinks ``p``)."""
        wd = group["weight_decay"]
        if not wd:
            return grad
        if group["decoupled_weight_decay"]:
            p.data *= 1 - group["lr"] * wd
            return grad
        return self.scratch(grad + wd * p.data)

    def _direction(self, m, v, g, step, group, v_max=None, work=None):
        """Update ``m``, ``v`` (and ``v_max``) in place with ``g``; return the step ``p -= result``.

        In-place updates into two temporaries the size of ``g`` (one for ``(1 - beta1) * g``,
        ``g * g`` and the denominator in turn, one for the update), counted in workspace, or
        into ``work``, a pair of arrays like ``g`` that a caller reuses (Adam8bit, chunk after chunk).
        """
        beta1, beta2 = group["betas"]
        xp = backend.array_module(v)
        tmp, update = work if work is not None else (self.scratch(xp.empty_like(g)), self.scratch(xp.empty_like(g)))
        m *= beta1
        m += xp.multiply(g, 1 - beta1, out=tmp)
        self._average_square(v, g, beta2, out=tmp)
        if v_max is not None:
            xp.maximum(v_max, v, out=v_max)
            v = v_max
        denom = xp.sqrt(v, out=tmp)
        denom /= math.sqrt(1 - beta2 ** step)
        denom += group["eps"]
        xp.divide(m, denom, out=update)
        update *= group["lr"] / (1 - beta1 ** step)
        return update

    def _moments(self, g, state, group):
        """Adam's step for gradient ``g`` with state shaped like ``g`` (created on first use)."""
        if "exp_avg" not in state:
            state["step"] = 0
            state["exp_avg"] = self.state_array(g)
            state["exp_avg_sq"] = self.state_array(g)
            if group["amsgrad"]:
                state["max_exp_avg_sq"] = self.state_array(g)
        state["step"] += 1
        return self._direction(state["exp_avg"], state["exp_avg_sq"], g, state["step"], group,
                               state.get("max_exp_avg_sq"))

    def update_parameter(self, p, grad, state, group):
        if backend.array_module(grad) is not np and grad.dtype == p.data.dtype == np.float32:
            return self._fused_update(p, grad, state, group)
        decoupled = group["decoupled_weight_decay"]
        g = grad if decoupled else self._decay(p, grad, group)
        update = self._moments(g, state, group)
        if decoupled:  # p *= 1 - lr * wd only now: an error above leaves p as it was
            self._decay(p, grad, group)
        p.data -= update

    def _fused_update(self, p, grad, state, group):
        """The whole step in one kernel (a device, float32): see the module docstring."""
        if "exp_avg" not in state:
            state["step"] = 0
            names = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
            for name in names:
                state[name] = self.state_array(grad)
        state["step"] += 1
        t, (beta1, beta2), lr, wd = state["step"], group["betas"], group["lr"], group["weight_decay"]
        decoupled = group["decoupled_weight_decay"]
        scalars = [0.0 if decoupled else wd, 1 - lr * wd if decoupled else 1.0, beta1, beta2, 1 - beta1, 1 - beta2,
                   math.sqrt(1 - beta2 ** t), lr / (1 - beta1 ** t), group["eps"]]
        kernel = ADAM_AMSGRAD if group["amsgrad"] else ADAM
        outputs = [p.data, state["exp_avg"], state["exp_avg_sq"]] + ([state["max_exp_avg_sq"]] if group["amsgrad"] else [])
        kernel(grad, *(np.float32(x) for x in scalars), *outputs)
