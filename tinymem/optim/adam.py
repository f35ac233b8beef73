"""Adam (Kingma and Ba, 2015), as ``torch.optim.Adam`` computes it.

    g = grad + weight_decay * p          (L2 penalty; AdamW decouples it instead)
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g^2
    p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
State: two buffers the size of the parameter, 8 bytes per float32 parameter, plus a step count.
"""
import math

from .. import backend
from .optimizer import Optimizer


class Adam(Optimizer):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        if not 0.0 <= betas[0] < 1.0 or not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"invalid betas {betas}: each must be in [0, 1)")
        super().__init__(params, lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay)

    def _update(self, p, grad, state, group):
        beta1, beta2 = group["betas"]
        if "exp_avg" not in state:
            state["step"] = 0
            state["exp_avg"] = self._state_array(p.data)
            state["exp_avg_sq"] = self._state_array(p.data)
        state["step"] += 1
        t = state["step"]
        g = self._scratch(grad + group["weight_decay"] * p.data) if group["weight_decay"] else grad
        m, v = state["exp_avg"], state["exp_avg_sq"]
        # In-place updates with one temporary at a time: the step's extra peak is two
        # parameter-sized arrays (denom and the update), both counted in workspace.
        m *= beta1
        m += self._scratch((1 - beta1) * g)
        v *= beta2
        sq = self._scratch(g * g)
        sq *= 1 - beta2
        v += sq
        del sq
        xp = backend.array_module(p.data)
        step_size = group["lr"] / (1 - beta1 ** t)
        denom = self._scratch(xp.sqrt(v))
        denom /= math.sqrt(1 - beta2 ** t)
        denom += group["eps"]
        update = self._scratch(m / denom)
        update *= step_size
        p.data -= update
