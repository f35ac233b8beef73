"""Adam (Kingma and Ba, 2015), as ``torch.optim.Adam`` computes it (AdamW in ``adamw.py``).

    g = grad + weight_decay * p          (L2 penalty; decoupled_weight_decay: p *= 1 - lr * wd)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g^2
    v_max = max(v_max, v)                (amsgrad only; the denominator then uses v_max)
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)

State: two buffers the size of the parameter, 8 bytes per float32 parameter (12 with amsgrad),
plus a step count (a Python int). :meth:`Adam._direction` is the arithmetic on its own, shared
with GaLore (moments of a projected gradient) and Adam8bit (moments dequantized for one step).
"""
import math

from .. import backend
from .optimizer import Optimizer


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
        decoupled = group["decoupled_weight_decay"]
        g = grad if decoupled else self._decay(p, grad, group)
        update = self._moments(g, state, group)
        if decoupled:  # p *= 1 - lr * wd only now: an error above leaves p as it was
            self._decay(p, grad, group)
        p.data -= update
