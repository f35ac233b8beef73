"""The autograd engine: Tensor, Function, the backward pass and the per-thread modes.

    tensor.py    Tensor (an array, its gradient and the node that made it), tensor(), backward()
    function.py  Function: one op; save_for_backward is the seam for saved-tensor hooks
    engine.py    run_backward: the iterative backward pass; sum_to for broadcast gradients
    modes.py     no_grad, saved_tensors_hooks, saved_as_is, forward_context, recomputing, op_hook
"""
from .engine import run_backward, sum_to
from .function import Function
from .modes import (current_saved_tensors_hooks, enable_grad, forward_context, forward_contexts,
                    is_grad_enabled, is_recomputing, no_grad, op_hook, recomputing, saved_as_is,
                    saved_tensors_hooks, set_grad_enabled)
from .tensor import Tensor, backward, tensor

__all__ = ["Tensor", "tensor", "backward", "Function", "run_backward", "sum_to", "no_grad",
           "enable_grad", "set_grad_enabled", "is_grad_enabled", "saved_tensors_hooks",
           "current_saved_tensors_hooks", "saved_as_is", "forward_context", "forward_contexts",
           "is_recomputing", "recomputing", "op_hook"]
