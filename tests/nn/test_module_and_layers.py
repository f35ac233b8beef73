"""Modules and layers: PyTorch's initialisation, traversal, modes and state dicts."""
import numpy as np
import pytest

import tinymem as tm
from conftest import requires_torch
from tinymem import memory, nn


def test_linear_init_is_uniform_within_pytorch_bound():
    layer = nn.Linear(400, 300)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    bound = 1 / np.sqrt(400)
    assert w.shape == (300, 400) and b.shape == (300,)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.98 * bound
    assert abs(w.std() - bound / np.sqrt(3)) < 0.01 * bound  # std of U(-a, a) is a / sqrt(3)
    assert w.dtype == np.float32


def test_parameters_are_found_in_order_and_counted_in_the_ledger():
    before = memory.live_bytes("parameter")
    model = tm.models.MLP([10, 20, 5], layernorm=True)
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"]
    assert model.num_parameters() == 10 * 20 + 20 + 2 * 20 + 20 * 5 + 5
    assert memory.live_bytes("parameter") - before == 4 * model.num_parameters()


def test_train_eval_switches_dropout():
    model = tm.models.MLP([50, 50, 5], dropout=0.5)
    x = tm.tensor(np.ones((4, 50), np.float32))
    model.eval()
    a, b = model(x).numpy(), model(x).numpy()
    np.testing.assert_array_equal(a, b)
    model.train()
    assert not np.array_equal(model(x).numpy(), model(x).numpy())


def test_state_dict_round_trip_and_errors():
    a, b = tm.models.MLP([6, 8, 3]), tm.models.MLP([6, 8, 3])
    b.load_state_dict(a.state_dict())
    for p, q in zip(a.parameters(), b.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    with pytest.raises(KeyError, match="missing keys"):
        b.load_state_dict({"0.weight": a.state_dict()["0.weight"]})
    bad = a.state_dict()
    bad["0.weight"] = np.zeros((2, 2), np.float32)
    with pytest.raises(ValueError, match="0.weight has shape"):
        b.load_state_dict(bad)


def test_to_dtype_keeps_parameter_objects_and_updates_ledger():
    model = tm.models.MLP([8, 8, 2])
    params = model.parameters()
    before = memory.live_bytes("parameter")
    model.to(dtype="float16")
    assert all(p.dtype == np.float16 for p in model.parameters())
    assert model.parameters() == params
    assert before - memory.live_bytes("parameter") == 2 * model.num_parameters()



@pytest.mark.parametrize("dtype", ["int8", np.int32, "uint8"])
def test_to_an_integer_dtype_is_refused_and_leaves_the_float_weights(dtype):
    model = tm.models.MLP([8, 8, 2])
    before = [p.numpy().copy() for p in model.parameters()]
    with pytest.raises(TypeError, match="to a float dtype"):
        model.to(dtype=dtype)
    for p, old in zip(model.parameters(), before):
        assert p.dtype == np.float32
        np.testing.assert_array_equal(p.numpy(), old)

def test_sequential_indexing_and_zero_grad():
    model = tm.models.MLP([4, 4, 4, 2])
    assert isinstance(model[0], nn.Linear) and len(model[:2]) == 2
    x = tm.tensor(np.ones((2, 4), np.float32))
    model(x).sum().backward()
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_module_setattr_before_init_is_explained():
    class Broken(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(np.zeros(2, np.float32))

    with pytest.raises(AttributeError, match="super"):
        Broken()


@requires_torch
def test_layernorm_and_embedding_modules_match_torch():
    import torch

    ln = nn.LayerNorm(6)
    ln.weight.data = tm.tensor(np.linspace(0.5, 1.5, 6).astype(np.float32)).data  # on the default device
    ref = torch.nn.LayerNorm(6)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(ln.weight.numpy()))
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    np.testing.assert_allclose(ln(tm.tensor(x)).numpy(), ref(torch.tensor(x)).detach().numpy(), rtol=1e-5, atol=1e-6)
    emb = nn.Embedding(10, 4)
    idx = np.array([[1, 9], [1, 0]])
    np.testing.assert_array_equal(emb(tm.tensor(idx)).numpy(), emb.weight.numpy()[idx])


def test_reassigning_a_layer_keeps_its_place_in_a_sequential():
    model = tm.models.MLP([4, 8, 8, 2])
    old = model[2]
    setattr(model, "2", nn.Linear(8, 8))
    assert [type(m).__name__ for m in model] == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert model[2] is not old and model(tm.tensor(np.ones((1, 4), np.float32))).shape == (1, 2)


def test_a_module_used_twice_is_listed_once_and_half_precision_wraps_it():
    lin = nn.Linear(2, 2)
    model = nn.Sequential(lin, nn.ReLU(), lin)
    assert [name for name, _ in model.named_modules()] == ["", "0", "1"]  # as PyTorch
    from tinymem.techniques.precision import half
    wrapped = half(model)  # patched each module once: it used to raise KeyError on unpatching
    assert wrapped(tm.randn(3, 2)).shape == (3, 2)
    bn = nn.BatchNorm2d(4)
    from tinymem.planner.terms.states import buffer_bytes
    assert buffer_bytes(nn.Sequential(bn, bn)) == buffer_bytes(nn.Sequential(bn))


def test_zero_grad_keeping_buffers_zeroes_nan_and_inf():
    layer = nn.Linear(2, 2)
    layer.weight.grad = np.full((2, 2), np.nan, np.float32)
    layer.bias.grad = np.full(2, np.inf, np.float32)
    buffer = layer.weight.grad.data
    layer.zero_grad(set_to_none=False)
    assert np.array_equal(layer.weight.grad.numpy(), np.zeros((2, 2))) and np.array_equal(layer.bias.grad.numpy(), [0, 0])
    assert layer.weight.grad.data is buffer  # the same buffer, zeroed in place


def test_to_moves_and_casts_gradients_with_their_parameters():
    layer = nn.Linear(2, 2)
    layer.weight.grad = np.ones((2, 2), np.float32)
    layer.to("cpu")
    np.testing.assert_array_equal(layer.weight.grad.numpy(), np.ones((2, 2)))
    layer.to(dtype="float64")
    assert layer.weight.dtype == np.float64 and layer.weight.grad.dtype == np.float64


def test_load_state_dict_checks_buffer_shapes_before_copying_anything():
    bn = nn.BatchNorm2d(3)
    state = bn.state_dict()
    state["weight"] = np.full(3, 5.0, np.float32)
    state["running_mean"] = np.zeros(7, np.float32)
    with pytest.raises(ValueError, match=r"running_mean has shape \(7,\), expected \(3,\)"):
        bn.load_state_dict(state)
    assert not np.any(bn.weight.numpy() == 5.0)  # nothing was copied
