"""Small networks shared by the checkpointing tests (tests/test_checkpoint.py, test_revolve.py, test_budget.py)."""
import numpy as np

import tinymem as tm
from tinymem import autograd, backend


class Counted(tm.nn.Module):
    """Wraps a layer and counts its forward calls in ``log`` (the layer's index per call)."""

    def __init__(self, layer, index, log):
        super().__init__()
        self.layer, self.index, self.log = layer, index, log

    def forward(self, x):
        self.log.append(self.index)
        return self.layer(x)


class RunningMean(tm.nn.Module):
    """A layer with a forward side effect, guarded the way BatchNorm guards its statistics."""

    def __init__(self):
        super().__init__()
        self.updates = 0
        self.running = 0.0

    def forward(self, x):
        if not autograd.is_recomputing():
            self.updates += 1
            self.running = 0.9 * self.running + 0.1 * float(x.data.mean())
        return x


def mlp(device=None, dtype="float32", depth=4, width=16, dropout=0.25):
    """An MLP with dropout and LayerNorm, as a list of layers (Linear, LayerNorm, ReLU, Dropout),
    on ``device`` (the default device when None)."""
    tm.manual_seed(0)
    model = tm.models.MLP([8] + [width] * depth + [3], dropout=dropout, layernorm=True)
    return model.to(device or backend.default_device(), dtype)


def step_grads(model, run, device=None, dtype="float32", seed=5):
    """Input and parameter gradients of one cross-entropy step with ``run(model, x)``."""
    for p in model.parameters():
        p.grad = None
    rng = np.random.default_rng(1)
    x = tm.tensor(rng.standard_normal((6, 8)), dtype=dtype, device=device, requires_grad=True)
    y = tm.tensor(rng.integers(0, 3, 6), device=device)
    tm.manual_seed(seed)
    loss = tm.functional.cross_entropy(run(model, x), y)
    loss.backward()
    return [x.grad.numpy()] + [p.grad.numpy() for p in model.parameters()]


def assert_identical(a, b):
    assert len(a) == len(b)
    for i, (u, v) in enumerate(zip(a, b)):
        assert u.dtype == v.dtype and np.array_equal(u, v), f"gradient {i} differs: max |diff| {np.abs(u - v).max()}"
