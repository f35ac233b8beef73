"""Layer streaming: exact training, at most ~two layers of weights on the device, bytes moved."""
import os

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.techniques import offload

SIZES = [32, 96, 80, 64, 10]


def _setup(device):
    tm.manual_seed(0)
    model = tm.models.MLP(SIZES).to(device)
    rng = np.random.default_rng(0)
    x = tm.tensor(rng.standard_normal((16, SIZES[0])).astype(np.float32), device=device)
    y = tm.tensor(rng.integers(0, 10, 16), device=device)
    return model, x, y


def _train(device, place=None, prefetch=1, directory=None, steps=3):
    model, x, y = _setup(device)
    opt = tm.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    net = offload.stream_layers(model, place, directory, prefetch) if place else model
    grads = []
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        grads.append([p.grad.numpy().copy() for p in model.parameters()])
        opt.step()
    if place:
        net.close()
    return grads, [p.numpy().copy() for p in model.parameters()], model


@pytest.mark.parametrize("place,prefetch", [("host", 0), ("host", 1), ("disk", 1), ("disk", 2)])
def test_streamed_training_is_bit_identical(device, place, prefetch, tmp_path):
    plain_grads, plain_params, _ = _train(device)
    grads, params, model = _train(device, place, prefetch, str(tmp_path))
    for a_step, b_step in zip(plain_grads, grads):
        assert all(np.array_equal(a, b) for a, b in zip(a_step, b_step))
    assert all(np.array_equal(a, b) for a, b in zip(plain_params, params))
    assert all(memory.locate(p.data)[1] == "device" for p in model.parameters())
    assert os.listdir(tmp_path) == []


def _layer_bytes():
    return [4 * (i * o + o) for i, o in zip(SIZES[:-1], SIZES[1:])]


@pytest.mark.parametrize("prefetch", [0, 1, 2])
def test_device_holds_at_most_prefetch_plus_one_layers(prefetch, tmp_path):
    model, x, y = _setup("cpu")
    layer = _layer_bytes()
    with offload.stream_layers(model, "disk", str(tmp_path), prefetch) as net:
        assert memory.live_bytes("parameter", "disk") == sum(layer)
        with memory.track(measure=False) as t:
            F.cross_entropy(net(x), y).backward()
        stats = net.stats()
    window = prefetch + 1
    bound = max(sum(layer[i:i + window]) for i in range(len(layer)))
    peak = t.max_by_bucket()["parameter"]
    assert max(layer) <= peak <= bound, t.table() + f"\nparameter peak {peak:,d} B > bound {bound:,d} B"
    # The schedule: every parameter comes up once in forward; in backward the weights saved by
    # the Linear layers come up again (not the first one: its input needs no gradient); every
    # gradient goes down once.
    weights = [4 * i * o for i, o in zip(SIZES[:-1], SIZES[1:])]
    assert stats["bytes_forward"] == sum(layer)
    assert stats["bytes_backward"] == sum(weights[1:])
    assert stats["bytes_grad_down"] == sum(layer)
    assert memory.live_bytes("parameter", "disk") == 0
    assert os.listdir(tmp_path) == []


def test_gradients_land_on_the_host_and_accumulate(tmp_path):
    model, x, y = _setup("cpu")
    with offload.stream_layers(model, "host") as net:
        F.cross_entropy(net(x), y).backward()
        once = [p.grad.numpy().copy() for p in model.parameters()]
        F.cross_entropy(net(x), y).backward()
        assert all(memory.locate(p.grad.data) == ("gradient", "host") for p in model.parameters())
        assert all(np.array_equal(2 * a, p.grad.numpy()) for a, p in zip(once, model.parameters()))


def test_streaming_composes_with_activation_offload(tmp_path):
    plain_grads, _, _ = _train("cpu", steps=1)
    model, x, y = _setup("cpu")
    with offload.stream_layers(model, "host") as net, offload.save_on_disk(str(tmp_path)) as acts:
        F.cross_entropy(net(x), y).backward()
        grads = [p.grad.numpy().copy() for p in model.parameters()]
        assert acts.stats()["bytes_out"] > 0
    assert all(np.array_equal(a, b) for a, b in zip(plain_grads[0], grads))


def test_no_weight_file_left_after_an_exception(tmp_path):
    model, x, y = _setup("cpu")
    with pytest.raises(KeyboardInterrupt):
        with offload.stream_layers(model, "disk", str(tmp_path)) as net:
            loss = F.cross_entropy(net(x), y)
            assert len(os.listdir(tmp_path)) == 1
            raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []
    del loss
    assert all(memory.locate(p.data)[1] == "device" for p in model.parameters())


def test_bad_place_is_explained():
    model, _, _ = _setup("cpu")
    with pytest.raises(ValueError, match="'host' or 'disk'"):
        offload.stream_layers(model, "gpu")
