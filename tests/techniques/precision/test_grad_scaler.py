"""GradScaler against torch.amp.GradScaler("cpu"): same gradients in, same scales, skips and weights out."""
import numpy as np
import pytest
from conftest import TOL, requires_torch

import tinymem as tm
from tinymem import optim
from tinymem.nn.utils import clip_grad_norm_
from tinymem.techniques.precision import GradScaler

INF_STEPS, NAN_STEPS = {2, 5, 6}, {9}


def _gradient_inputs(steps, n=6, seed=0):
    rng = np.random.default_rng(seed)
    xs = []
    for t in range(steps):
        x = rng.standard_normal(n).astype(np.float32)
        if t in INF_STEPS:
            x[t % n] = np.inf
        if t in NAN_STEPS:
            x[0] = np.nan
        xs.append(x)
    return xs


def _run_tinymem(w0, xs, clip_every, **kw):
    w = tm.tensor(w0.copy(), requires_grad=True)
    opt = optim.SGD([w], lr=0.1, momentum=0.9)
    scaler = GradScaler(**kw)
    scales, stepped = [], []
    for t, x in enumerate(xs):
        opt.zero_grad()
        loss = (w * tm.tensor(x)).sum()
        scaler.scale(loss).backward()
        if t % clip_every == 0:
            scaler.unscale_(opt)
            clip_grad_norm_([w], max_norm=1.0)
        before = w.numpy().copy()
        scaler.step(opt)
        stepped.append(not np.array_equal(before, w.numpy()))
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, stepped, w.numpy(), scaler.state_dict()


def _run_torch(w0, xs, clip_every, **kw):
    import torch
    w = torch.tensor(w0.copy(), requires_grad=True)
    opt = torch.optim.SGD([w], lr=0.1, momentum=0.9)
    scaler = torch.amp.GradScaler("cpu", **kw)
    scales, stepped = [], []
    for t, x in enumerate(xs):
        opt.zero_grad()
        loss = (w * torch.from_numpy(x)).sum()
        scaler.scale(loss).backward()
        if t % clip_every == 0:
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_([w], max_norm=1.0)
        before = w.detach().numpy().copy()
        scaler.step(opt)
        stepped.append(not np.array_equal(before, w.detach().numpy()))
        scaler.update()
        scales.append(scaler.get_scale())
    return scales, stepped, w.detach().numpy(), scaler.state_dict()


@requires_torch
@pytest.mark.parametrize("growth_interval,clip_every", [(1, 2), (3, 1), (2000, 100)])
def test_matches_torch(growth_interval, clip_every):
    xs = _gradient_inputs(14)
    w0 = np.random.default_rng(1).standard_normal(6).astype(np.float32)
    kw = dict(init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5, growth_interval=growth_interval)
    ours = _run_tinymem(w0, xs, clip_every, **kw)
    theirs = _run_torch(w0, xs, clip_every, **kw)
    assert ours[0] == theirs[0], "scale trajectory"
    assert ours[1] == theirs[1], "skipped steps"
    assert ours[1].count(False) == len(INF_STEPS | NAN_STEPS)
    np.testing.assert_allclose(ours[2], theirs[2], *TOL["float32"])
    assert ours[3] == theirs[3], "state_dict"


def test_growth_interval_one_doubles_every_clean_step():
    w = tm.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.0)
    scaler = GradScaler(init_scale=8.0, growth_interval=1)
    for _ in range(3):
        scaler.scale((w * 1.0).sum()).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    assert scaler.get_scale() == 64.0


def test_static_scale_never_changes_but_still_skips():
    w = tm.tensor(np.ones(2, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=1.0)
    scaler = GradScaler(init_scale=1024.0, growth_factor=1.0, backoff_factor=1.0, growth_interval=1)
    for x in ([1.0, 1.0], [np.inf, 1.0], [1.0, 1.0]):
        opt.zero_grad()
        scaler.scale((w * tm.tensor(np.array(x, np.float32))).sum()).backward()
        scaler.step(opt)
        scaler.update()
        assert scaler.get_scale() == 1024.0
    assert w.numpy().tolist() == [-1.0, -1.0]  # two steps of lr * 1, the inf step skipped


def _one_backward(scaler):
    w = tm.tensor(np.ones(2, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    scaler.scale((w * 2.0).sum()).backward()
    return w, opt


def test_double_unscale_raises_as_in_torch():
    scaler = GradScaler()
    w, opt = _one_backward(scaler)
    scaler.unscale_(opt)
    assert w.grad.numpy().tolist() == [2.0, 2.0]  # exactly: the scale is a power of two
    with pytest.raises(RuntimeError, match="already been called"):
        scaler.unscale_(opt)
    scaler.step(opt)
    with pytest.raises(RuntimeError, match="after step"):
        scaler.unscale_(opt)
    with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
        scaler.step(opt)
    scaler.update()
    scaler.scale((w * 2.0).sum()).backward()
    scaler.unscale_(opt)  # allowed again after update()


def test_update_without_step_raises():
    with pytest.raises(AssertionError, match="No inf checks"):
        GradScaler().update()


def test_update_with_new_scale_and_state_dict_round_trip():
    scaler = GradScaler(init_scale=4.0, growth_interval=5)
    _, opt = _one_backward(scaler)
    scaler.step(opt)
    scaler.update(new_scale=100.0)
    assert scaler.get_scale() == 100.0
    other = GradScaler()
    other.load_state_dict(scaler.state_dict())
    assert other.state_dict() == scaler.state_dict() == {
        "scale": 100.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 5,
        "_growth_tracker": 0}


def test_disabled_is_a_pass_through():
    scaler = GradScaler(enabled=False)
    w, opt = _one_backward(scaler)
    assert w.grad.numpy().tolist() == [2.0, 2.0]
    scaler.unscale_(opt)
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 1.0 and scaler.state_dict() == {}
    assert np.allclose(w.numpy(), 0.8)
    with pytest.raises(RuntimeError, match="empty"):
        GradScaler().load_state_dict({})


def test_unscale_of_fp16_grads_refuses():
    w = tm.tensor(np.ones(2, np.float16), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    w.grad = tm.tensor(np.ones(2, np.float16))
    with pytest.raises(ValueError, match="FP16"):
        GradScaler().unscale_(opt)


@pytest.mark.parametrize("bad", [dict(init_scale=0.0), dict(growth_factor=0.5),
                                 dict(backoff_factor=1.5), dict(growth_interval=0)])
def test_bad_arguments_explain(bad):
    with pytest.raises(ValueError):
        GradScaler(**bad)


def _collapse_then_clean(n=6, overflowing=160, clean=3):
    """Gradients that overflow for ``overflowing`` steps in a row (the scale backs off from 1.0
    to exactly 0 after about 150), then clean ones."""
    rng = np.random.default_rng(1)
    xs = [np.full(n, np.inf, np.float32) for _ in range(overflowing)]
    return xs + [rng.standard_normal(n).astype(np.float32) for _ in range(clean)]


def test_a_scale_collapsed_to_zero_skips_the_step_instead_of_writing_nan():
    w0 = np.ones(6, np.float32)
    scales, stepped, w, _ = _run_tinymem(w0, _collapse_then_clean(), clip_every=10**9, init_scale=1.0)
    assert scales[-1] == 0.0
    assert not any(stepped), "a step ran with 1/scale = inf"
    assert np.array_equal(w, w0) and np.isfinite(w).all()



def test_row_sparse_gradients_are_unscaled_and_checked(device):
    """A sparse embedding_bag with RowWiseAdagrad under a GradScaler: unscale_ raised "expected a
    NumPy or CuPy array ... wrap it first" on the RowSparse gradient. Its values are unscaled (the
    step equals the unscaled one) and a NaN among them skips the step."""
    weights = []
    for scaled in (True, False):
        tm.manual_seed(0)
        layer = tm.nn.EmbeddingBag(6, 2, mode="sum", sparse=True).to(device)
        opt = tm.optim.RowWiseAdagrad(layer.parameters(), lr=0.1)
        scaler = GradScaler(init_scale=1024.0, enabled=scaled)
        loss = layer(tm.tensor(np.array([[0, 1], [1, 4]])).to(device)).sum()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        weights.append(tm.backend.to_numpy(layer.weight.data))
    np.testing.assert_allclose(weights[0], weights[1], rtol=1e-6)
    layer = tm.nn.EmbeddingBag(6, 2, mode="sum", sparse=True).to(device)
    opt = tm.optim.RowWiseAdagrad(layer.parameters(), lr=0.1)
    before = tm.backend.to_numpy(layer.weight.data).copy()
    scaler = GradScaler(init_scale=1024.0)
    scaler.scale(layer(tm.tensor(np.array([[0, 1]])).to(device)).sum() * float("nan")).backward()
    scaler.step(opt)
    scaler.update()
    np.testing.assert_array_equal(tm.backend.to_numpy(layer.weight.data), before)
    assert scaler.get_scale() == 512.0
