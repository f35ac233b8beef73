"""RMSprop (Hinton, 2012), as ``torch.optim.RMSprop``, with momentum and the centered variant.

    g = grad + weight_decay * p
    v = alpha * v + (1 - alpha) * g^2
    centered:  a = a + (1 - alpha) * (g - a);  d = sqrt(v - a^2) + eps   (a variance, not a 2nd moment)
    otherwise: d = sqrt(v) + eps
    momentum:  b = momentum * b + g / d;  p -= lr * b
    otherwise: p -= lr * g / d

State, per float32 parameter: 4 bytes for ``v``, +4 with momentum (``b``), +4 centered (``a``);
so 4, 8 or 12 bytes. Unlike Adam there is no bias correction: the first steps are large
because ``v`` starts at zero.
"""
import math

from .. import backend
from .optimizer import Optimizer


class RMSprop(Optimizer):
    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0,
                 centered=False):
        if eps < 0 or weight_decay < 0 or momentum < 0:
            raise ValueError("eps, weight_decay and momentum must be >= 0")
        super().__init__(params, lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                         momentum=momentum, centered=centered)

    @staticmethod
    def _checked_group(group, hyper):
        """The base checks, then alpha's range, for every group (and a loaded state's)."""
        full = Optimizer._checked_group(group, hyper)
        if not 0.0 <= full["alpha"] <= 1.0:
            raise ValueError(f"invalid alpha {full['alpha']}: it must be in [0, 1]")
        return full

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter: ``v``, plus ``b`` with momentum, plus ``a`` centered."""
        buffers = 1 + (group["momentum"] > 0) + bool(group["centered"])
        return buffers * math.prod(shape) * itemsize

    def update_parameter(self, p, grad, state, group):
        if "square_avg" not in state:
            state["step"] = 0
            state["square_avg"] = self.state_array(p.data)
            if group["momentum"] > 0:
                state["momentum_buffer"] = self.state_array(p.data)
            if group["centered"]:
                state["grad_avg"] = self.state_array(p.data)
        state["step"] += 1
        alpha, wd = group["alpha"], group["weight_decay"]
        g = self.scratch(grad + wd * p.data) if wd else grad
        v = state["square_avg"]
        self._average_square(v, g, alpha)
        xp = backend.array_module(v)
        if group["centered"]:
            a = state["grad_avg"]
            a += self.scratch((1 - alpha) * (g - a))
            denom = self.scratch(v - a * a)
            xp.sqrt(denom, out=denom)
        else:
            denom = self.scratch(xp.sqrt(v))
        denom += group["eps"]
        update = self.scratch(g / denom)
        del denom
        if group["momentum"] > 0:
            b = state["momentum_buffer"]
            b *= group["momentum"]
            b += update
            update = self.scratch(group["lr"] * b)
        else:
            update *= group["lr"]
        p.data -= update
