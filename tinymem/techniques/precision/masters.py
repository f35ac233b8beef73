"""The fp32 master weights of mixed-precision training (Micikevicius et al. 2018).

:class:`MasterOptimizer` wraps any tinymem optimizer: its ``param_groups`` hold fp32 copies of
the model's half parameters (the masters, 4 bytes per parameter, counted in the ``optimizer``
bucket as ZeRO counts them). ``step()`` copies the half gradients into fp32 master gradients
(4 bytes per parameter, alive during the step, in ``gradient``), runs the wrapped optimizer on
the masters, and rounds the masters back into the half parameters in place. Updating the half
weights directly would lose every update below half an ulp: in float16, 1.0 + 1e-4 == 1.0.
Built by :func:`tinymem.techniques.precision.half`.
"""
import weakref

import numpy as np

from ... import backend
from ...optim.optimizer import OptimizerWrapper
from ...autograd.tensor import Tensor
from .formats import get_format


class MasterOptimizer(OptimizerWrapper):
    """An optimizer whose parameters are fp32 master copies of a half model's weights.

    ``step()``: (1) master.grad = float32(half grad) for each parameter (4 bytes per parameter,
    alive until the step ends); (2) the wrapped optimizer updates the masters; (3) each master
    is rounded into its half parameter in place. ``param_groups`` and ``state`` are the wrapped
    optimizer's (learning-rate schedules work unchanged); the masters live in the ``optimizer``
    bucket.
    """

    def __init__(self, optimizer, model_params, fmt):
        super().__init__(optimizer)
        self.format = get_format(fmt)
        by_id = {id(p): p for p in model_params}
        self.pairs = []
        self._sources = []
        master_of = {}
        for group in optimizer.param_groups:
            masters = []
            for p in group["params"]:
                if id(p) not in by_id:
                    raise ValueError("the optimizer holds a tensor that is not a parameter of the model; "
                                     "build the optimizer on model.parameters() before half()")
                if p.dtype != np.float32:
                    raise TypeError(f"half() needs a float32 model to make fp32 masters from, got a "
                                    f"{p.dtype} parameter (was half() already applied?)")
                master = Tensor.wrap(p.data.copy(), requires_grad=True, bucket="optimizer")
                master_of[p] = master
                masters.append(master)
                self.pairs.append((p, master))
                self._sources.append(None)
            group["params"] = masters
        optimizer.state = {master_of.get(p, p): s for p, s in optimizer.state.items()}

    def master_params(self):
        """The fp32 master tensors, in parameter order (clip these after ``unscale_``)."""
        return [m for _, m in self.pairs]

    def copy_grads_to_masters(self):
        """master.grad = float32(param.grad) for every half gradient not copied yet.

        :class:`GradScaler` calls this before unscaling, so the division by the scale happens
        in float32. A gradient already copied (same half array) is not copied again.
        """
        for i, (p, master) in enumerate(self.pairs):
            if p.grad is None:
                continue
            source = self._sources[i]
            if source is not None and source() is p.grad.data and master.grad is not None:
                continue
            # Decoding a 2-byte array always makes a new float32 array: the master grad owns it.
            master.grad = Tensor.wrap(self.format.decode(p.grad.data, np.float32), bucket="gradient")
            self._sources[i] = weakref.ref(p.grad.data)

    def step(self):
        """Update the fp32 masters from the half gradients and round them into the model."""
        self.copy_grads_to_masters()
        result = self.optimizer.step()
        for i, (p, master) in enumerate(self.pairs):
            if master.grad is not None:
                p.data[...] = self.format.encode(master.data)
            master.grad = None
            self._sources[i] = None
        return result

    def zero_grad(self, set_to_none=True):
        for i, (p, master) in enumerate(self.pairs):
            master.grad = None
            self._sources[i] = None
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.data[...] = 0  # zero bits are 0.0 in float16 and bfloat16 alike

    def state_bytes(self):
        """Bytes of optimizer-side state: the wrapped optimizer's plus the fp32 masters."""
        return self.optimizer.state_bytes() + sum(m.nbytes for m in self.master_params())

    def state_dict(self):
        return {"optimizer": self.optimizer.state_dict(), "dtype": self.format.name,
                "master_params": [m.numpy().copy() for m in self.master_params()]}

    def load_state_dict(self, state_dict):
        if state_dict.get("dtype") != self.format.name:
            raise ValueError(f"state dict was saved from a {state_dict.get('dtype')} MasterOptimizer, "
                             f"this one is {self.format.name}")
        saved = state_dict["master_params"]
        if len(saved) != len(self.pairs):
            raise ValueError(f"state dict has {len(saved)} master tensors, this optimizer {len(self.pairs)}")
        self.optimizer.load_state_dict(state_dict["optimizer"])
        for (p, master), value in zip(self.pairs, saved):
            if tuple(value.shape) != master.shape:
                raise ValueError(f"master of shape {value.shape} for a parameter of shape {master.shape}")
            master.data[...] = backend.to_device(np.asarray(value, np.float32), master.device)
            p.data[...] = self.format.encode(master.data)
