"""The batch-size finder's answer trains under the budget and one more sample does not."""
import numpy as np
import pytest

import tinymem as tm
from tinymem import memory, models, optim
from tinymem.techniques.batch_size import default_loss, find_max_batch


def _make_batch(n):
    rng = np.random.default_rng(n)
    return tm.tensor(rng.standard_normal((n, 32)).astype(np.float32)), tm.tensor(rng.integers(0, 10, n))


def _adam(params):
    return optim.Adam(params, lr=1e-3)


def _step_fits(model, budget, n):
    """An independent training step (not the finder's own helper) under the budget."""
    try:
        with memory.track(budget=budget, measure=False):
            x, y = _make_batch(n)
            opt = _adam(model.parameters())
            default_loss(model, x, y).backward()
            opt.step()
        return True
    except memory.OutOfMemoryError:
        return False
    finally:
        model.zero_grad()


def test_found_batch_trains_under_budget_and_one_more_does_not():
    model = models.MLP([32, 128, 128, 10])
    before = [p.numpy().copy() for p in model.parameters()]
    budget = memory.live_bytes() + 600_000
    live = memory.live_bytes()
    best = find_max_batch(model, budget, _make_batch, optimizer_fn=_adam)
    assert memory.live_bytes() == live, "a trial step left bytes behind"
    assert 8 < best < 1000
    # The search left the model untouched.
    assert all(np.array_equal(p.numpy(), b) for p, b in zip(model.parameters(), before))
    assert all(p.grad is None for p in model.parameters())
    assert _step_fits(model, budget, best)
    assert not _step_fits(model, budget, best + 1)


def test_finder_on_a_unet_restores_batchnorm_statistics():
    net = models.UNet(base=2, depth=2)
    rng = np.random.default_rng(0)

    def make(n):
        return (tm.tensor(rng.standard_normal((n, 1, 8, 8)).astype(np.float32)),
                tm.tensor(rng.integers(0, 4, (n, 8, 8))))

    stats = net.state_dict()
    budget = memory.live_bytes() + 200_000
    best = find_max_batch(net, budget, make)
    assert best >= 2
    after = net.state_dict()
    assert all(np.array_equal(after[k], stats[k]) for k in stats)


def test_finder_explains_when_nothing_fits():
    model = models.MLP([32, 128, 10])
    with pytest.raises(memory.OutOfMemoryError, match="even batch size 1"):
        find_max_batch(model, memory.live_bytes() + 100, _make_batch)
