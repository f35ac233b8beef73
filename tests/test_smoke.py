import numpy as np

import tinymem as tm
import tinymem.functional as F


def test_mlp_step_frees_activations():
    model = tm.models.MLP([8, 16, 3])
    x = tm.tensor(np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32))
    y = tm.tensor(np.array([0, 1, 2, 1]))
    loss = F.cross_entropy(model(x), y)
    assert tm.memory.live_bytes("activation") > 0
    loss.backward()
    assert tm.memory.live_bytes("activation") == 0
    assert all(p.grad is not None and p.grad.shape == p.shape for p in model.parameters())
