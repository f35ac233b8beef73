"""AdamW (Loshchilov and Hutter, 2019): Adam with decoupled weight decay, as ``torch.optim.AdamW``.

    p *= 1 - lr * weight_decay           (before the Adam step, not through the gradient)
    then Adam's update (amsgrad optional)

The decay no longer passes through ``v``, so it shrinks every weight at the same rate instead
of being divided by the gradient's scale. Default ``weight_decay=1e-2`` as PyTorch.
State: as Adam, 8 bytes per float32 parameter (12 with amsgrad).
"""
from .adam import Adam


class AdamW(Adam):
    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 amsgrad=False):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, decoupled_weight_decay=True)
