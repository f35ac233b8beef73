"""Adagrad (Duchi, Hazan and Singer, 2011), as ``torch.optim.Adagrad``.

    g = grad + weight_decay * p
    clr = lr / (1 + (t - 1) * lr_decay)
    s += g^2                              (the sum of every squared gradient so far)
    p -= clr * g / (sqrt(s) + eps)

State: one buffer the size of the parameter (4 bytes per float32 parameter) and a step count.
Pitfall: ``s`` only grows, so the effective step size only shrinks; on long runs Adagrad
stalls, which RMSprop and Adam fix with a decaying average. PyTorch creates ``s`` in the
constructor; tinymem creates it at the first step (the same bytes once training runs).
"""
import math

from .. import backend
from .optimizer import Optimizer


class Adagrad(Optimizer):
    def __init__(self, params, lr=1e-2, lr_decay=0.0, weight_decay=0.0,
                 initial_accumulator_value=0.0, eps=1e-10):
        if lr_decay < 0 or weight_decay < 0 or initial_accumulator_value < 0 or eps < 0:
            raise ValueError("lr_decay, weight_decay, initial_accumulator_value and eps must be >= 0")
        super().__init__(params, lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value, eps=eps)

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter of ``shape``: the running sum of squares."""
        return math.prod(shape) * itemsize

    def update_parameter(self, p, grad, state, group):
        if "sum" not in state:
            state["step"] = 0
            state["sum"] = self.state_array(p.data, fill=group["initial_accumulator_value"])
        state["step"] += 1
        wd = group["weight_decay"]
        g = self.scratch(grad + wd * p.data) if wd else grad
        clr = group["lr"] / (1 + (state["step"] - 1) * group["lr_decay"])
        total = state["sum"]
        total += self.scratch(g * g)
        xp = backend.array_module(total)
        std = self.scratch(xp.sqrt(total))
        std += group["eps"]
        update = self.scratch(g / std)
        del std
        update *= clr
        p.data -= update
