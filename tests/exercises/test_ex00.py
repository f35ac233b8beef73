import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory

pytestmark = pytest.mark.exercise_00


@pytest.mark.parametrize("sizes", [[4, 3], [64, 128, 10], [10, 20, 30, 5]])
def test_parameter_bytes(exercise, sizes):
    model = tm.models.MLP(sizes)
    assert exercise("ex00").mlp_parameter_bytes(sizes) == sum(p.nbytes for p in model.parameters())


def test_adam_step_bytes(exercise):
    sizes, batch = [12, 7, 3], 5
    model = tm.models.MLP(sizes)
    opt = tm.optim.Adam(model.parameters())
    F.cross_entropy(model(tm.tensor(np.ones((batch, 12), np.float32))), np.zeros(batch, np.int64)).backward()
    opt.step()
    expected = {"parameter": sum(p.nbytes for p in model.parameters()),
                "gradient": sum(p.grad.nbytes for p in model.parameters()), "optimizer": opt.state_bytes()}
    assert exercise("ex00").adam_step_bytes(sizes, batch) == expected


@pytest.mark.parametrize("sizes,batch", [([8, 16, 4], 3), ([20, 30, 30, 10], 7)])
def test_activation_bytes_match_the_ledger(exercise, sizes, batch):
    model = tm.models.MLP(sizes)
    before = memory.live_bytes("activation")
    loss = F.cross_entropy(model(tm.tensor(np.ones((batch, sizes[0]), np.float32))), np.zeros(batch, np.int64))
    assert exercise("ex00").mlp_activation_bytes(sizes, batch) == memory.live_bytes("activation") - before
    del loss
