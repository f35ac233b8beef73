"""A paged fine-tune saved mid-run with tm.save, rebuilt, loaded with tm.load and continued is
bit for bit the run that was never interrupted: paged or not, with state on the host at save time,
and across paged and plain optimizers."""
import numpy as np
import pytest
from conftest import to_np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, nn, optim
from tinymem.techniques.lora import apply_lora, paged, trainable_parameters

STEPS, SAVE_AT = 6, 3


def _build(paging, device="cpu"):
    tm.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16, device=device), nn.GELU(), nn.Linear(16, 8, device=device))
    apply_lora(model, r=4, alpha=8)
    inner = optim.Adam(trainable_parameters(model), lr=1e-2)
    return model, (paged(inner) if paging else inner)


def _step(model, opt, i, device="cpu"):
    x = tm.tensor(np.random.default_rng(i).standard_normal((5, 8)).astype(np.float32), device=device)
    opt.zero_grad()
    F.mse_loss(model(x), x).backward()
    opt.step()


def _close(opt):
    if hasattr(opt, "close"):
        opt.close()


def _uninterrupted(device):
    model, opt = _build(False, device)
    for i in range(STEPS):
        _step(model, opt, i, device)
    return [to_np(p).copy() for p in trainable_parameters(model)]


@pytest.mark.parametrize("saved_paged,resumed_paged", [(True, True), (True, False), (False, True)])
def test_a_resumed_run_is_bit_identical_to_an_uninterrupted_one(tmp_path, device, saved_paged, resumed_paged):
    expected = _uninterrupted(device)
    model, opt = _build(saved_paged, device)
    for i in range(SAVE_AT):
        _step(model, opt, i, device)
    if saved_paged:
        opt.page_out(10 ** 9)  # all state on the host when it is saved
        assert memory.live_bytes("optimizer", "host") > 0
    tm.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, tmp_path / "run.ckpt")
    _close(opt)
    del model, opt

    model, opt = _build(resumed_paged, device)
    checkpoint = tm.load(tmp_path / "run.ckpt")
    model.load_state_dict(checkpoint["model"])
    opt.load_state_dict(checkpoint["optimizer"])
    assert all(memory.locate(v) == ("optimizer", "device") for s in opt.state.values() for v in s.values()
               if hasattr(v, "shape"))
    for i in range(SAVE_AT, STEPS):
        _step(model, opt, i, device)
    _close(opt)
    for got, want in zip((to_np(p) for p in trainable_parameters(model)), expected):
        np.testing.assert_array_equal(got, want)


def test_the_paging_order_is_saved_and_restored():
    model, opt = _build(paging=True)
    _step(model, opt, 0)
    params = trainable_parameters(model)
    params[0].grad = tm.tensor(np.ones(params[0].shape, np.float32))
    for p in params[1:]:
        p.grad = None
    opt.step()  # the first parameter is now the most recently updated: the last to page out
    order = opt.state_dict()["paging_order"]
    assert order == list(range(1, len(params))) + [0]
    _, again = _build(paging=True)
    again.load_state_dict(opt.state_dict())
    assert again.state_dict()["paging_order"] == order
    with pytest.raises(ValueError, match="paging_order must list parameter indices below 4"):
        again.load_state_dict(dict(opt.state_dict(), paging_order=[7]))
    with pytest.raises(ValueError, match="paging_order must list"):
        again.load_state_dict(dict(opt.state_dict(), paging_order=5))
    opt.close()
    again.close()
