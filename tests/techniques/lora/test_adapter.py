"""LoRALinear and apply_lora: gradients against PyTorch and float64 differences, B = 0 at start,
merge/unmerge, dropout on the adapter path only, and the ledger of a LoRA step."""
import numpy as np
import pytest
from conftest import requires_torch, to_np
from gradcheck import numeric_grads, tinymem_grads, torch_grads

import tinymem as tm
import tinymem.functional as F
from tinymem import backend, memory, models, nn, optim
from tinymem.techniques.lora import LoRALinear, apply_lora, lora_modules, trainable_parameters

SCALING = 16 / 4  # alpha / r of the formula tests


def lora_formula(x, w, b, a, bb):
    """y = x W^T + b + (alpha/r) (x A^T) B^T, written with the operators tinymem and torch share."""
    return x @ w.T + b + (x @ a.T) @ bb.T * SCALING


def _arrays(seed=0, batch=3, d_in=5, d_out=4, r=4):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in ((batch, d_in), (d_out, d_in), (d_out,), (r, d_in), (d_out, r))]


def _layer(device, arrays, r=4, alpha=16.0):
    x, w, b, a, bb = arrays
    layer = LoRALinear(nn.Linear(w.shape[1], w.shape[0], device=device), r, alpha)
    for p, value in ((layer.base.weight, w), (layer.base.bias, b), (layer.lora_A, a), (layer.lora_B, bb)):
        p.data = backend.to_device(np.asarray(value, np.float32), device)
    return layer


@requires_torch
def test_gradients_of_a_b_and_the_input_equal_pytorch_autograd(device):
    arrays = _arrays()
    layer = _layer(device, arrays)
    x = tm.tensor(arrays[0].astype(np.float32), requires_grad=True, device=device)
    w_out = np.random.default_rng(1).standard_normal((3, 4))
    (layer(x) * tm.tensor(w_out.astype(np.float32), device=device)).sum().backward()
    expected_out, (gx, _, _, ga, gb) = torch_grads(lora_formula, arrays, w_out)
    np.testing.assert_allclose(to_np(layer(x)), expected_out, rtol=1e-5, atol=1e-5)
    for got, want in ((x.grad, gx), (layer.lora_A.grad, ga), (layer.lora_B.grad, gb)):
        np.testing.assert_allclose(to_np(got), want, rtol=1e-4, atol=1e-5)
    assert layer.base.weight.grad is None and layer.base.bias.grad is None


def test_the_formula_tests_use_matches_float64_differences():
    """The formula the layer is held to, differentiated by tinymem in float64, against central
    differences: the reference itself is right."""
    arrays = _arrays(seed=2)
    w, numeric = numeric_grads(lambda *a: lora_formula(*a), arrays)
    _, analytic = tinymem_grads(lora_formula, arrays, w)
    for got, want in zip(analytic, numeric):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_layer_gradient_equals_float64_differences_of_the_layer():
    arrays = _arrays(seed=3)
    layer = _layer("cpu", arrays)  # on the CPU: the differences write NumPy arrays into it
    layer.to(dtype="float64")
    x = tm.tensor(arrays[0], requires_grad=True, device="cpu")
    w_out = np.random.default_rng(4).standard_normal((3, 4))
    (layer(x) * tm.tensor(w_out, device="cpu")).sum().backward()

    def through_layer(a, bb):
        layer.lora_A.data, layer.lora_B.data = a, bb
        with tm.no_grad():
            return layer(tm.tensor(arrays[0], device="cpu")).numpy()

    ga, gb = layer.lora_A.grad.numpy(), layer.lora_B.grad.numpy()
    _, (na, nb) = numeric_grads(through_layer, arrays[3:])
    # numeric_grads draws its own output weights (seed 123): recompute tinymem's with those.
    w123 = np.random.default_rng(123).standard_normal((3, 4))
    layer.lora_A.data, layer.lora_B.data = arrays[3].copy(), arrays[4].copy()
    layer.lora_A.grad = layer.lora_B.grad = None
    (layer(tm.tensor(arrays[0], device="cpu")) * tm.tensor(w123, device="cpu")).sum().backward()
    np.testing.assert_allclose(layer.lora_A.grad.numpy(), na, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(layer.lora_B.grad.numpy(), nb, rtol=1e-6, atol=1e-8)
    assert not np.allclose(ga, layer.lora_A.grad.numpy())  # the weights differ: the check is not vacuous


def test_a_fresh_adapter_computes_exactly_what_the_base_did(device):
    model = models.TransformerLM(vocab_size=11, context=8, d_model=16, n_heads=2, n_layers=2, device=device)
    ids = backend.to_device(np.random.default_rng(0).integers(0, 11, (2, 8)), device)
    with tm.no_grad():
        before = to_np(model(ids))
        apply_lora(model, r=4, alpha=8)
        after = to_np(model(ids))
    assert len(lora_modules(model)) == 2 * 3 + 1  # out_proj, mlp.0, mlp.2 per block, and the head
    np.testing.assert_array_equal(before, after)


def test_merge_and_unmerge_agree_with_the_adapter_path_to_float32_rounding(device):
    layer = LoRALinear(nn.Linear(24, 12, device=device), r=4, alpha=8)
    layer.lora_B.data = backend.to_device(np.random.default_rng(0).standard_normal((12, 4)).astype(np.float32), device)
    x = tm.tensor(np.random.default_rng(1).standard_normal((5, 24)).astype(np.float32), device=device)
    w0 = to_np(layer.base.weight).copy()
    with tm.no_grad():
        unmerged = to_np(layer(x))
        merged = to_np(layer.merge()(x))
        assert not np.allclose(to_np(layer.base.weight), w0)
        again = to_np(layer.unmerge()(x))
    np.testing.assert_allclose(merged, unmerged, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(again, unmerged, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(to_np(layer.base.weight), w0, atol=1e-6)
    with pytest.raises(RuntimeError, match="not merged"):
        layer.unmerge()


def test_a_float64_layer_merges_to_float64_rounding(device):
    """alpha / r = 7/3 is not a float32 number: it was rounded to float32 in delta_weight, and a
    float64 layer's merged output moved by 2.45e-8 relative (tolerance here: 1e-13)."""
    rng = np.random.default_rng(0)
    base = nn.Linear(24, 12, device=device)
    for p in (base.weight, base.bias):
        p.data = backend.to_device(rng.standard_normal(p.shape), device)
    layer = LoRALinear(base, r=3, alpha=7)
    assert layer.lora_A.dtype == layer.lora_B.dtype == np.float64
    layer.lora_B.data = backend.to_device(rng.standard_normal((12, 3)), device)
    x = tm.tensor(rng.standard_normal((5, 24)), device=device)
    w0 = to_np(layer.base.weight).copy()
    with tm.no_grad():
        unmerged = to_np(layer(x))
        merged = to_np(layer.merge()(x))
        expected = w0 + 7 / 3 * (to_np(layer.lora_B) @ to_np(layer.lora_A))
        np.testing.assert_allclose(to_np(layer.base.weight), expected, rtol=1e-15, atol=1e-15)
        again = to_np(layer.unmerge()(x))
    np.testing.assert_allclose(merged, unmerged, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(again, unmerged, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(to_np(layer.base.weight), w0, rtol=0, atol=1e-15)


def test_dropout_acts_on_the_adapter_path_only():
    layer = LoRALinear(nn.Linear(30, 6), r=2, alpha=2, dropout=0.5)
    x = tm.tensor(np.random.default_rng(0).standard_normal((4, 30)).astype(np.float32))
    with tm.no_grad():
        base = layer.base(x).numpy()
        np.testing.assert_array_equal(layer(x).numpy(), base)  # B = 0: the adapter adds nothing
        layer.lora_B.data[...] = 1
        train = layer(x).numpy() - base
        layer.eval()
        plain = layer(x).numpy() - base
    assert not np.allclose(train, plain)  # half the adapter's inputs were dropped in training
    expected = (x.numpy() @ layer.lora_A.numpy().T).sum(axis=1, keepdims=True) * np.ones((1, 6))
    np.testing.assert_allclose(plain, expected, rtol=1e-5, atol=1e-5)


def test_the_ledger_shows_frozen_weights_without_gradient_or_state(device):
    model = nn.Sequential(nn.Linear(64, 128, device=device), nn.GELU(), nn.Linear(128, 64, device=device))
    frozen = sum(p.nbytes for p in model.parameters())
    apply_lora(model, r=8, alpha=16)
    adapters = sum(p.nbytes for p in trainable_parameters(model))
    assert adapters == 4 * 8 * (64 + 128) * 2
    opt = optim.Adam(model.parameters(), lr=1e-3)
    x = tm.tensor(np.random.default_rng(0).standard_normal((16, 64)).astype(np.float32), device=device)
    F.mse_loss(model(x), x).backward()
    opt.step()
    live = memory.LEDGER.by_bucket()
    table = memory.format_table(live)
    assert live["parameter"] >= frozen + adapters, table
    assert live["gradient"] == adapters, table  # no gradient for the 4·(64·128·2 + 192) frozen bytes
    assert opt.state_bytes() == 2 * adapters and live["optimizer"] == 2 * adapters, table
    for p in model.parameters():
        assert (p.grad is None) != p.requires_grad


def test_targets_choose_linears_by_name_and_refuse_a_pattern_that_matches_nothing():
    model = models.TransformerLM(vocab_size=7, context=4, d_model=8, n_heads=2, n_layers=2)
    apply_lora(model, r=2, targets="blocks.*.mlp.*")
    assert [n for n, _ in lora_modules(model)] == ["blocks.0.mlp.0", "blocks.0.mlp.2", "blocks.1.mlp.0",
                                                   "blocks.1.mlp.2"]
    assert all(not p.requires_grad for n, p in model.named_parameters() if "lora_" not in n)
    with pytest.raises(ValueError, match="no Linear matches"):
        apply_lora(models.TransformerLM(vocab_size=7, context=4, d_model=8, n_heads=2), r=2, targets="nothing*")
    with pytest.raises(ValueError, match="r"):
        LoRALinear(nn.Linear(3, 3), r=0)
