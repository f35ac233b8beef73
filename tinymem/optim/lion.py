"""Lion (Chen et al., 2023, "Symbolic Discovery of Optimization Algorithms").

    c = beta1 * m + (1 - beta1) * g
    p *= 1 - lr * weight_decay            (decoupled, as AdamW)
    p -= lr * sign(c)
    m = beta2 * m + (1 - beta2) * g

State: one momentum buffer, 4 bytes per float32 parameter: half of Adam's. Temporaries: two
arrays the size of the parameter (c and the step, which is reused for m's update), counted in
the ledger's workspace bucket: 8 bytes per float32 parameter at the peak of the update. PyTorch has no
Lion; the defaults are the paper's (lr=1e-4, betas=(0.9, 0.99), weight_decay=0). Pitfall: every
coordinate moves by exactly ``lr`` each step, so Lion wants a learning rate 3-10x smaller than
AdamW's (and a larger weight decay to keep ``lr * weight_decay`` the same).
"""
import math

from .. import backend
from .optimizer import Optimizer


class Lion(Optimizer):
    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        super().__init__(params, lr=lr, betas=betas, weight_decay=weight_decay)

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter of ``shape``: one momentum buffer."""
        return math.prod(shape) * itemsize

    def update_parameter(self, p, grad, state, group):
        if "exp_avg" not in state:
            state["exp_avg"] = self.state_array(p.data)
        beta1, beta2 = group["betas"]
        m = state["exp_avg"]
        xp = backend.array_module(m)
        c = self.scratch(beta1 * m)
        step = self.scratch((1 - beta1) * grad)
        c += step
        # sign(c) into the other buffer: NumPy's sign written over its own input runs ~6x slower
        xp.sign(c, out=step)
        del c
        step *= group["lr"]
        if group["weight_decay"]:
            p.data *= 1 - group["lr"] * group["weight_decay"]
        p.data -= step
        m *= beta2
        xp.multiply(grad, 1 - beta2, out=step)  # the buffer again, for m's update
        m += step
