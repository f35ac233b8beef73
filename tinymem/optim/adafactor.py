"""Adafactor (Shazeer and Stern, 2018), following ``torch.optim.Adafactor`` (PyTorch >= 2.5).

For a matrix gradient G (m x n; for more dims, the last two are factored) Adafactor keeps
only the row means R (m) and column means C (n) of G^2 and rebuilds the second moment as
their normalised outer product, the best rank-1 fit in I-divergence:

    beta2_t = 1 - t^beta2_decay          (decay -0.8: averages over more steps as t grows)
    rho_t   = min(lr, 1 / sqrt(t))        (a relative step size)
    alpha_t = max(eps2, RMS(p)) * rho_t   (steps scale with the parameter's own size)
    p *= 1 - lr * weight_decay
    R = R + (1 - beta2_t) (mean_j G^2 - R);  C = C + (1 - beta2_t) (mean_i G^2 - C)
    V = R C^T / max(mean(R), eps1)        (vectors keep a full V = EMA of g^2 instead)
    U = G / sqrt(max(V, eps1^2))
    p -= alpha_t * U / max(1, RMS(U) / d)  (update clipping at threshold d)

State: 4(m + n) bytes for an m x n float32 matrix instead of Adam's 8mn (for 512 x 512,
0.2% of Adam's); vectors keep 4 bytes per element. No first moment (beta1 = 0), as PyTorch's.
Differences from the paper, as in PyTorch: no first moment, eps1 defaults to the dtype's
machine epsilon, and ``lr`` caps the relative step. Time: one m x n outer product per step
(a temporary of the parameter's size); on a device no host sync (the two RMS stay on the device).
"""
import math

import numpy as np

from .. import backend
from ..checks import real_number
from .optimizer import Optimizer


def _rms(x, xp):
    """Root mean square, through a norm so that no temporary of x's size is made: a float on the
    CPU, a 0-d float64 array on a device (reading it on the host would be a sync per call)."""
    if not x.size:
        return 0.0
    norm = xp.linalg.norm(x.ravel())
    return (float(norm) if xp is np else norm.astype(np.float64)) / math.sqrt(x.size)


def _larger(xp, a, b):
    """max(a, b) for a float ``a`` and an RMS ``b`` (a float, or a 0-d device array: no host
    sync). A NaN RMS gives ``a``, on a device as on the CPU: Python's ``max`` (PyTorch's too)
    keeps its first argument when the second is NaN, and so does ``fmax``, where ``maximum``
    would return NaN. So one inf gradient element makes one NaN weight of a vector on a device
    as on the CPU (its update is NaN there, and the clipping divisor stays 1), not all of them."""
    return max(a, b) if xp is np else xp.fmax(a, b)


def _lerp_(xp, start, end, weight):
    """``start += weight * (end - start)`` in place, rounded as ``torch.lerp_`` rounds it: from
    the start below weight 1/2, from the end above (so weight 1, the first step, gives exactly
    ``end``). PyTorch's form also decides what one inf gradient element does: at weight >= 1/2,
    ``inf - inf * (1 - weight)`` is NaN, so the running mean of an inf row is NaN and every weight
    of a matrix becomes NaN, as in PyTorch. ``end`` is a temporary and is overwritten.

    Above 1/2, ``end - (end - start) * (1 - weight)`` is computed in ``start`` as
    ``end + (start - end) * (1 - weight)``: the same bits (rounding is symmetric in sign), and
    no temporary, so every step allocates the same arrays whatever its weight (the planner's
    probe lines up steps of both kinds event by event)."""
    w = start.dtype.type(weight)  # PyTorch's scalar weight, in the tensor's dtype
    if weight < 0.5:
        end -= start
        end *= w
        start += end
    else:
        start -= end
        start *= start.dtype.type(1) - w
        start += end


class Adafactor(Optimizer):
    def __init__(self, params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0, weight_decay=0.0):
        super().__init__(params, lr=lr, beta2_decay=beta2_decay, eps=eps, d=d, weight_decay=weight_decay)

    @staticmethod
    def _checked_group(group, hyper):
        """The base checks, then Adafactor's own, for the constructor's options, a group's own
        and those a loaded state brings (``load_state_dict`` checks through this too)."""
        full = Optimizer._checked_group(group, hyper)
        beta2_decay, eps, d, weight_decay = (full[key] for key in ("beta2_decay", "eps", "d", "weight_decay"))
        if real_number("Adafactor: beta2_decay", beta2_decay) > 0:
            raise ValueError(f"beta2_decay must be <= 0, got {beta2_decay}")
        if not (isinstance(eps, (tuple, list)) and len(eps) == 2):
            raise TypeError(f"Adafactor: eps must be a pair (eps1 or None, eps2), got {eps!r}")
        if (eps[0] is not None and real_number("Adafactor: eps[0]", eps[0]) < 0) or \
                real_number("Adafactor: eps[1]", eps[1]) < 0:
            raise ValueError(f"eps must be (None or >= 0, >= 0), got {eps}")
        if real_number("Adafactor: the clipping threshold d", d) < 1.0:
            raise ValueError(f"the clipping threshold d must be >= 1, got {d}")
        if real_number("Adafactor: weight_decay", weight_decay) < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        full["eps"] = tuple(eps)
        return full

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter: rows + columns for >= 2 dims, a full buffer otherwise."""
        if len(shape) < 2:
            return math.prod(shape) * itemsize
        return (math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1]) * itemsize

    def update_parameter(self, p, grad, state, group):
        factored = grad.ndim > 1
        if "step" not in state:
            state["step"] = 0
            if factored:
                state["row_var"] = self.state_array(p.data, shape=grad.shape[:-1] + (1,))
                state["col_var"] = self.state_array(p.data, shape=grad.shape[:-2] + (1, grad.shape[-1]))
            else:
                state["variance"] = self.state_array(p.data)
        state["step"] += 1
        t = state["step"]
        xp = backend.array_module(grad)
        eps1 = group["eps"][0]
        if eps1 is None:
            eps1 = float(np.finfo(p.dtype).eps)
        lr, weight = group["lr"], t ** group["beta2_decay"]
        alpha = _larger(xp, group["eps"][1], _rms(p.data, xp)) * min(lr, 1 / math.sqrt(t))
        if group["weight_decay"]:
            p.data *= 1 - lr * group["weight_decay"]
        if factored:
            row, col = state["row_var"], state["col_var"]
            # mean of g^2 along one axis without a full-size g*g temporary
            _lerp_(xp, row, xp.einsum("...ij,...ij->...i", grad, grad)[..., None] / grad.shape[-1], weight)
            _lerp_(xp, col, xp.einsum("...ij,...ij->...j", grad, grad)[..., None, :] / grad.shape[-2], weight)
            var = self.scratch(row @ col)
            var /= xp.maximum(row.mean(axis=-2, keepdims=True), eps1)
        else:
            v = state["variance"]
            _lerp_(xp, v, self.scratch(grad * grad), weight)
            var = self.scratch(v.copy())
        xp.maximum(var, eps1 * eps1, out=var)
        xp.sqrt(var, out=var)
        update = self.scratch(grad / var)
        del var
        scale = alpha / _larger(xp, 1.0, _rms(update, xp) / group["d"])
        # the CPU's Python float multiplies as a float32 (NumPy's weak scalar); a 0-d float64
        # array would make the device multiply in float64 and round differently
        update *= scale if xp is np else scale.astype(update.dtype)
        p.data -= update
