"""Optimizer-state offload: exact updates, state counted on the host or disk, bytes moved, fit a budget."""
import contextlib
import os

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.techniques import offload

SIZES = [24, 64, 48, 10]
OPTIMIZERS = {"sgd": lambda ps: tm.optim.SGD(ps, lr=0.1, momentum=0.9),
              "adam": lambda ps: tm.optim.Adam(ps, lr=1e-2, weight_decay=0.01)}


def _setup(device, sizes=SIZES, n=16):
    tm.manual_seed(0)
    model = tm.models.MLP(sizes).to(device)
    rng = np.random.default_rng(0)
    x = tm.tensor(rng.standard_normal((n, sizes[0])).astype(np.float32), device=device)
    y = tm.tensor(rng.integers(0, sizes[-1], n), device=device)
    return model, x, y


def _train(device, name, place=None, prefetch=1, directory=None, steps=3):
    model, x, y = _setup(device)
    opt = OPTIMIZERS[name](model.parameters())
    if place:
        opt = offload.offload_optimizer(opt, place, directory, prefetch)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model, opt


@pytest.mark.parametrize("name", list(OPTIMIZERS))
@pytest.mark.parametrize("place,prefetch", [("host", 1), ("disk", 0), ("disk", 1)])
def test_offloaded_optimizer_is_bit_identical(device, name, place, prefetch, tmp_path):
    plain, plain_opt = _train(device, name)
    n_state, expected = plain_opt.state_bytes(), plain_opt.state_dict()
    del plain_opt
    model, opt = _train(device, name, place, prefetch, str(tmp_path))
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(plain.parameters(), model.parameters()))
    assert memory.live_bytes("optimizer", "device") == 0
    assert memory.live_bytes("optimizer", place) == n_state == opt.state_bytes()
    saved = opt.state_dict()
    for i, s in expected["state"].items():
        for k, v in s.items():
            assert np.array_equal(np.asarray(saved["state"][i][k]), np.asarray(v)), k
    opt.close()
    assert memory.live_bytes("optimizer", "device") == n_state
    assert memory.live_bytes("optimizer", place) == 0
    assert os.listdir(tmp_path) == []


def test_bytes_moved_follow_the_schedule(tmp_path):
    model, opt = _train("cpu", "adam", "disk", 1, str(tmp_path), steps=2)
    n = sum(p.nbytes for p in model.parameters())
    stats = opt.stats()
    # Per step: every gradient down and every parameter up; the master copied once; Adam's
    # two moments (2 n bytes) written every step and read back from the second step on.
    assert stats["bytes_grad_down"] == stats["bytes_param_up"] == 2 * n
    assert stats["bytes_master"] == n
    assert stats["bytes_state_out"] == 2 * (2 * n) and stats["bytes_state_in"] == 2 * n
    assert memory.live_bytes("optimizer", "disk") == 2 * n
    opt.close()


def test_master_follows_a_new_parameter_array():
    model, x, y = _setup("cpu")
    opt = offload.offload_optimizer(tm.optim.SGD(model.parameters(), lr=0.1))
    F.cross_entropy(model(x), y).backward()
    opt.step()
    model.load_state_dict({k: np.zeros_like(v) for k, v in model.state_dict().items()})
    opt.step()
    expected = -0.1 * model[0].weight.grad.numpy()
    assert np.array_equal(model[0].weight.numpy(), expected)


BUDGET_SIZES = [64, 512, 512, 512, 10]


def _fit_run(budget, offloaded, tmp_path, steps=2):
    model, x, y = _setup("cpu", BUDGET_SIZES, n=64)
    opt = tm.optim.Adam(model.parameters(), lr=1e-3)
    net = offload.stream_layers(model, "host") if offloaded else model
    if offloaded:
        opt = offload.offload_optimizer(opt, "host")
    losses = []
    try:
        with memory.track(budget=budget, measure=False) as t:
            for _ in range(steps):
                opt.zero_grad()
                with offload.save_on_disk(str(tmp_path)) if offloaded else contextlib.nullcontext():
                    loss = F.cross_entropy(net(x), y)
                    loss.backward()
                opt.step()
                losses.append(loss.item())
                del loss
    finally:
        if offloaded:
            net.close()
            opt.close()
    return losses, [p.numpy().copy() for p in model.parameters()], t


def test_offload_fits_a_budget_that_plain_training_exceeds(tmp_path):
    # The MLP's parameters are 2.2 MB: they fit in 4 MB, but not with their gradients and
    # Adam's state. Streamed weights, host gradients and state and disk activations do.
    budget = 4_000_000
    with pytest.raises(tm.OutOfMemoryError):
        _fit_run(budget, False, tmp_path)
    plain_losses, plain_params, _ = _fit_run(None, False, tmp_path)
    losses, params, t = _fit_run(budget, True, tmp_path)
    assert t.peak() <= budget, t.table()
    assert losses == plain_losses
    assert all(np.array_equal(a, b) for a, b in zip(plain_params, params))
    assert os.listdir(tmp_path) == []


ALL = ["SGD", "Adagrad", "RMSprop", "Adam", "AdamW", "Lion", "Adafactor", "Adam8bit", "GaLore"]


@pytest.mark.parametrize("name", [n for n in ALL if hasattr(tm.optim, n)])
@pytest.mark.parametrize("place", ["host", "disk"])
def test_every_optimizer_can_be_offloaded_exactly(name, place, tmp_path):
    # The wrapper goes through the optimizer's state storage only, so each optimizer another
    # engineer writes works unchanged: same parameters, no optimizer byte left on the device.
    def train(wrap):
        model, x, y = _setup("cpu")
        opt = getattr(tm.optim, name)(model.parameters())
        if wrap:
            opt = offload.offload_optimizer(opt, place, str(tmp_path))
        for _ in range(3):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        return model, opt
    plain, plain_opt = train(False)
    del plain_opt
    model, opt = train(True)
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(plain.parameters(), model.parameters()))
    assert memory.live_bytes("optimizer", "device") == 0
    assert memory.live_bytes("optimizer", place) == opt.state_bytes() > 0 or name == "SGD"
    opt.close()
    assert os.listdir(tmp_path) == []


def test_no_state_file_left_after_an_exception(tmp_path):
    model, x, y = _setup("cpu")
    with pytest.raises(KeyboardInterrupt):
        with offload.offload_optimizer(tm.optim.Adam(model.parameters()), "disk", str(tmp_path)) as opt:
            F.cross_entropy(model(x), y).backward()
            opt.step()
            assert len(os.listdir(tmp_path)) == 1
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []
    assert memory.live_bytes("optimizer", "disk") == 0
