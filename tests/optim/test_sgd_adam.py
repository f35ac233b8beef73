"""SGD and Adam against torch.optim: 20 steps on the same parameters and gradients."""
import numpy as np
import pytest

import tinymem as tm
from conftest import requires_torch
from tinymem import memory


def _run_both(make_ours, make_theirs, steps=20, shapes=((7, 5), (5,)), seed=0):
    import torch

    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]
    ours = [tm.nn.Parameter(a.copy()) for a in init]
    theirs = [torch.nn.Parameter(torch.tensor(a.copy())) for a in init]
    opt_a, opt_b = make_ours(ours), make_theirs(theirs)
    for step in grads:
        for p, q, g in zip(ours, theirs, step):
            p.grad = g.copy()
            q.grad = torch.tensor(g.copy())
        opt_a.step()
        opt_b.step()
    return ours, theirs, opt_a


SGD_CASES = [dict(lr=0.1), dict(lr=0.05, momentum=0.9), dict(lr=0.05, momentum=0.9, dampening=0.3),
             dict(lr=0.05, momentum=0.9, nesterov=True), dict(lr=0.05, momentum=0.5, weight_decay=0.1),
             dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01)]
ADAM_CASES = [dict(lr=1e-3), dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6), dict(lr=1e-2, weight_decay=0.1)]


@requires_torch
@pytest.mark.parametrize("kwargs", SGD_CASES, ids=[str(k) for k in SGD_CASES])
def test_sgd_matches_torch(kwargs):
    import torch

    ours, theirs, _ = _run_both(lambda p: tm.optim.SGD(p, **kwargs), lambda p: torch.optim.SGD(p, **kwargs))
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)


@requires_torch
@pytest.mark.parametrize("kwargs", ADAM_CASES, ids=[str(k) for k in ADAM_CASES])
def test_adam_matches_torch(kwargs):
    import torch

    ours, theirs, _ = _run_both(lambda p: tm.optim.Adam(p, **kwargs), lambda p: torch.optim.Adam(p, **kwargs))
    for p, q in zip(ours, theirs):
        np.testing.assert_allclose(p.numpy(), q.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_state_bytes_match_formula_and_ledger():
    before = memory.live_bytes("optimizer")
    params = [tm.nn.Parameter(np.zeros((30, 20), np.float32)), tm.nn.Parameter(np.zeros(20, np.float32))]
    for p in params:
        p.grad = np.ones(p.shape, np.float32)
    adam, sgd = tm.optim.Adam(params), tm.optim.SGD(params, lr=0.1, momentum=0.9)
    adam.step()
    assert adam.state_bytes() == 8 * (30 * 20 + 20)
    sgd.step()
    assert sgd.state_bytes() == 4 * (30 * 20 + 20)
    assert memory.live_bytes("optimizer") - before == adam.state_bytes() + sgd.state_bytes()
    assert tm.optim.SGD(params, lr=0.1).state_bytes() == 0


def test_state_dict_round_trip_continues_identically():
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(6)]

    def run(split):
        p = tm.nn.Parameter(np.ones((4, 3), np.float32))
        opt = tm.optim.Adam([p], lr=0.1)
        for i, g in enumerate(grads):
            if i == split:
                state = opt.state_dict()
                p = tm.nn.Parameter(p.numpy().copy())
                opt = tm.optim.Adam([p], lr=0.5)
                opt.load_state_dict(state)
            p.grad = g
            opt.step()
        return p.numpy()

    np.testing.assert_array_equal(run(split=None), run(split=3))


def test_bad_hyperparameters_are_refused():
    p = [tm.nn.Parameter(np.zeros(2, np.float32))]
    with pytest.raises(ValueError, match="learning rate"):
        tm.optim.SGD(p, lr=-1.0)
    with pytest.raises(ValueError, match="Nesterov"):
        tm.optim.SGD(p, lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        tm.optim.Adam(p, betas=(1.0, 0.9))
    with pytest.raises(ValueError, match="empty"):
        tm.optim.Adam([])
