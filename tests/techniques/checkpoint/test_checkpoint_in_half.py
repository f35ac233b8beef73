"""Checkpointing inside a half-precision model recomputes in half precision.

The recomputation runs in backward, after HalfModule's forward has exited; the forward-context
seam (tinymem.autograd.forward_context) makes it re-enter the upcasts and half storage, so the
gradients equal those of the same half model without checkpointing, bit for bit.
"""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import nn
from tinymem.techniques import checkpoint as ckpt
from tinymem.techniques import precision
from tinymem.techniques.checkpoint.revolve import checkpoint_revolve


class Blocks(nn.Module):
    def __init__(self, mode, segments=2):
        super().__init__()
        self.body = tm.models.MLP([16, 32, 32, 32, 32, 32, 4], dropout=0.1)
        self.mode, self.segments = mode, segments

    def forward(self, x):
        layers = list(self.body)
        if self.mode == "segments":
            return ckpt.checkpoint_sequential(layers, self.segments, x)
        if self.mode == "revolve":
            return checkpoint_revolve(layers, 2, x)
        return self.body(x)


def _grads(mode, dtype):
    tm.manual_seed(0)
    model = Blocks(mode)
    opt = tm.optim.SGD(model.parameters(), lr=0.1)
    half_model, opt = precision.half(model, opt, dtype=dtype)
    rng = np.random.default_rng(0)
    x = tm.tensor(rng.standard_normal((8, 16)).astype(np.float32), requires_grad=True)
    y = tm.tensor(rng.integers(0, 4, 8))
    F.cross_entropy(half_model(x), y).backward()
    return [p.grad.numpy() for p in model.parameters()] + [x.grad.numpy()]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("mode", ["segments", "revolve"])
def test_checkpointed_half_model_has_the_gradients_of_the_half_model(mode, dtype):
    plain, checkpointed = _grads("plain", dtype), _grads(mode, dtype)
    for a, b in zip(plain, checkpointed):
        np.testing.assert_array_equal(a, b)
