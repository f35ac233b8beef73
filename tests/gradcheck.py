"""Reference gradients: float64 central differences, and PyTorch autograd when installed."""
import numpy as np

import tinymem as tm


def numeric_grads(fn, arrays, eps=1e-6):
    """d sum(fn(*arrays) * w) / d arrays by central differences in float64, w fixed random.

    Weighting the output by a fixed random ``w`` checks every output element, not just their sum.
    """
    arrays = [np.array(a, dtype=np.float64) for a in arrays]
    out = fn(*arrays)
    w = np.random.default_rng(123).standard_normal(np.shape(out))

    def scalar():
        return float(np.sum(np.asarray(fn(*arrays)) * w))

    grads = []
    for a in arrays:
        g = np.zeros_like(a)
        flat, gflat = a.reshape(-1), g.reshape(-1)
        for i in range(flat.size):
            old = flat[i]
            flat[i] = old + eps
            up = scalar()
            flat[i] = old - eps
            down = scalar()
            flat[i] = old
            gflat[i] = (up - down) / (2 * eps)
        grads.append(g)
    return w, grads


def tinymem_grads(fn, arrays, w, dtype=np.float64, device="cpu"):
    """Gradients of sum(fn(*tensors) * w) computed by tinymem."""
    tensors = [tm.tensor(np.asarray(a, dtype=dtype), requires_grad=True, device=device) for a in arrays]
    out = fn(*tensors)
    (out * tm.tensor(np.asarray(w, dtype=dtype), device=device)).sum().backward()
    return out, [t.grad.numpy() if t.grad is not None else np.zeros(t.shape) for t in tensors]


def torch_grads(fn, arrays, w):
    """Gradients of sum(fn(*tensors) * w) computed by PyTorch in float64."""
    import torch

    tensors = [torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
    out = fn(*tensors)
    (out * torch.tensor(np.asarray(w, dtype=np.float64))).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() if t.grad is not None else np.zeros(t.shape) for t in tensors]
