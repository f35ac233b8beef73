"""Stochastic gradient descent with momentum, dampening, Nesterov and weight decay.

The update is PyTorch's ``torch.optim.SGD``:
    g = grad + weight_decay * p
    buf = g (first step) or momentum * buf + (1 - dampening) * g
    g = g + momentum * buf (nesterov) or buf
    p -= lr * g
State: none without momentum; one buffer the size of the parameter with it (4 bytes per
float32 parameter).
"""
import math

from .optimizer import Optimizer


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
        super().__init__(params, lr=lr, momentum=momentum, dampening=dampening,
                         nesterov=nesterov, weight_decay=weight_decay)

    @staticmethod
    def _checked_group(group, hyper):
        """The base checks, then Nesterov's rule, for every group (and a loaded state's)."""
        full = Optimizer._checked_group(group, hyper)
        if full["nesterov"] and (full["momentum"] <= 0 or full["dampening"] != 0):
            raise ValueError("Nesterov momentum needs momentum > 0 and dampening = 0")
        return full

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter of ``shape``: a momentum buffer, or nothing."""
        return math.prod(shape) * itemsize if group["momentum"] else 0

    def update_parameter(self, p, grad, state, group):
        wd, momentum, dampening = group["weight_decay"], group["momentum"], group["dampening"]
        g = self.scratch(grad + wd * p.data) if wd else grad
        if momentum:
            if "momentum_buffer" not in state:
                buf = state["momentum_buffer"] = self.state_array(p.data)
                buf[...] = g
            else:
                buf = state["momentum_buffer"]
                buf *= momentum
                buf += self.scratch((1 - dampening) * g) if dampening else g
            g = self.scratch(g + momentum * buf) if group["nesterov"] else buf
        p.data -= self.scratch(group["lr"] * g)
