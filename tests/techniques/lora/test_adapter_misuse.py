"""apply_lora and LoRALinear used as users do: refused calls that change nothing, a second call,
a shared Linear, "merge for deployment, reload", a float16 model and a QLoRA model moved to the
device."""
import numpy as np
import pytest
from conftest import to_np

import tinymem as tm
import tinymem.functional as F
from tinymem import backend, memory, nn, optim
from tinymem.techniques.lora import LoRALinear, apply_lora, apply_qlora, lora_modules, trainable_parameters


def _mlp(device="cpu", seed=0):
    tm.manual_seed(seed)
    return nn.Sequential(nn.Linear(6, 8, device=device), nn.GELU(), nn.Linear(8, 3, device=device))


def _x(device="cpu", rows=5, cols=6, seed=1):
    return tm.tensor(np.random.default_rng(seed).standard_normal((rows, cols)).astype(np.float32), device=device)


def _train_adapters(model, steps=2):
    opt = optim.Adam(trainable_parameters(model), lr=1e-1)
    for _ in range(steps):
        opt.zero_grad()
        F.mse_loss(model(_x()), _x(cols=3, seed=2)).backward()
        opt.step()


def _flags(model):
    return [p.requires_grad for p in model.parameters()]


@pytest.mark.parametrize("alpha", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_alpha_is_refused(alpha):
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        LoRALinear(nn.Linear(3, 2), 2, alpha)
    model = _mlp()
    with pytest.raises(ValueError, match="alpha must be a finite number"):
        apply_lora(model, 2, alpha)
    assert all(_flags(model)) and not lora_modules(model)


@pytest.mark.parametrize("call", [lambda m: apply_lora(m, 0), lambda m: apply_qlora(m, -1),
                                  lambda m: apply_lora(m, 2, dropout=1.0), lambda m: apply_lora(m, 2, targets=None),
                                  lambda m: apply_lora(m, 2, alpha="8"), lambda m: apply_lora(m, 2, targets="nothing"),
                                  lambda m: apply_lora(m, 2, wrap=lambda linear: None),
                                  lambda m: apply_qlora(m, 2, double_quant="no")])
def test_a_refused_call_freezes_nothing_and_replaces_nothing(call):
    model = _mlp()
    before = [to_np(p).copy() for p in model.parameters()]
    with pytest.raises((ValueError, TypeError)):
        call(model)
    assert all(_flags(model)) and not lora_modules(model)
    assert [type(m) for m in model] == [nn.Linear, nn.GELU, nn.Linear]
    for p, b in zip(model.parameters(), before):
        np.testing.assert_array_equal(to_np(p), b)


def test_raw_errors_name_the_mistake_and_the_fix():
    with pytest.raises(TypeError, match=r"dropout \(a probability, e.g. 0.1\) must be a number, got '0.1'"):
        LoRALinear(nn.Linear(3, 3), 2, dropout="0.1")
    with pytest.raises(TypeError, match="targets must be a shell pattern.*got None"):
        apply_lora(_mlp(), 2, targets=None)
    with pytest.raises(TypeError, match=r"bare Linear.*LoRALinear\(linear, r\)"):
        apply_lora(nn.Linear(3, 3), 2)


def test_a_second_call_skips_adapted_layers_and_keeps_the_first_adapters_training():
    model = _mlp()
    apply_lora(model, 2, targets="0")
    first = model[0]
    apply_lora(model, 2)  # every Linear: only the one without an adapter is new
    assert model[0] is first and type(first.base) is nn.Linear
    assert [n for n, _ in lora_modules(model)] == ["0", "2"]
    assert first.lora_A.requires_grad and first.lora_B.requires_grad
    a, b = to_np(first.lora_A).copy(), to_np(first.lora_B).copy()
    _train_adapters(model)
    assert not np.array_equal(to_np(first.lora_A), a) and not np.array_equal(to_np(first.lora_B), b)
    with pytest.raises(ValueError, match="already carry adapters"):
        apply_lora(model, 2)
    assert first.lora_A.requires_grad


def test_a_shared_linear_gets_one_adapter_and_merging_adds_its_update_once():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(shared, nn.GELU(), shared)
    apply_lora(model, 2, alpha=4)
    assert model[0] is model[2] and isinstance(model[0], LoRALinear) and model[0].base is shared
    assert len(trainable_parameters(model)) == 2
    model[0].lora_B.data = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    x = _x(cols=4)
    with tm.no_grad():
        unmerged = to_np(model(x))
        for _, layer in lora_modules(model):
            layer.merge()
        merged = to_np(model(x))
    np.testing.assert_allclose(merged, unmerged, rtol=1e-5, atol=1e-5)
    twice = nn.Linear(4, 4)
    quantized = apply_qlora(nn.Sequential(twice, nn.GELU(), twice), 2)
    assert quantized[0] is quantized[2] and len(trainable_parameters(quantized)) == 2  # quantized once
    tied = nn.Linear(4, 4)
    partly = nn.Sequential(tied, nn.GELU(), nn.Sequential(tied))
    with pytest.raises(ValueError, match=r"shared by \['0', '2.0'\].*match all or none"):
        apply_lora(partly, 2, targets="2.*")
    assert partly[0] is tied and all(_flags(partly))


def test_merge_for_deployment_then_reload_applies_the_update_once():
    model = _mlp()
    apply_lora(model, 2, alpha=4)
    _train_adapters(model)
    x = _x()
    with tm.no_grad():
        expected = to_np(model(x))
        for _, layer in lora_modules(model):
            layer.merge()
        state = model.state_dict()
        fresh = apply_lora(_mlp(seed=5), 2, alpha=4)
        fresh.load_state_dict(state)
        np.testing.assert_allclose(to_np(fresh(x)), expected, rtol=1e-5, atol=1e-5)
        assert all(layer.merged for _, layer in lora_modules(fresh))
        unmerged_state = fresh.state_dict()
        for _, layer in lora_modules(fresh):
            layer.unmerge()
        unmerged = fresh.state_dict()
        # An unmerged state loaded into a merged model: the base weight without the update.
        model.load_state_dict(unmerged)
        assert not any(layer.merged for _, layer in lora_modules(model))
        np.testing.assert_allclose(to_np(model(x)), expected, rtol=1e-5, atol=1e-5)
        model.load_state_dict(unmerged_state)
        np.testing.assert_allclose(to_np(model(x)), expected, rtol=1e-5, atol=1e-5)


def _saved_bytes(model, x):
    """Bytes of activation the forward keeps for backward."""
    with memory.track(measure=False) as t:
        loss = model(x).sum()
        saved = t.current_by_bucket()["activation"]
    loss.backward()
    return saved


def test_adapters_of_a_float16_model_are_float16_and_b_zero_changes_nothing():
    x32 = np.random.default_rng(1).standard_normal((64, 6)).astype(np.float32)
    x16 = tm.tensor(x32.astype(np.float16))
    half, full = _mlp().to(dtype="float16"), _mlp()
    with tm.no_grad():
        base = to_np(half(x16))
    apply_lora(half, 4, targets="0")
    apply_lora(full, 4, targets="0")
    assert half[0].lora_A.dtype == half[0].lora_B.dtype == np.float16
    with tm.no_grad():
        out = to_np(half(x16))
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, base)
    # Every saved array is half the float32 one: the adapter does not make the rest float32.
    assert 2 * _saved_bytes(half, x16) == _saved_bytes(full, tm.tensor(x32))


def test_to_the_device_moves_a_qlora_models_codes_and_scales(standin):
    model = apply_qlora(_mlp("cpu"), 2)
    x = _x("cpu")
    with tm.no_grad():
        expected = to_np(model(x))
    model.to("cuda")
    for _, layer in lora_modules(model):
        assert all(backend.device_of(a) == "cuda" for a in layer.base.stored().values())
    with tm.no_grad():
        np.testing.assert_array_equal(to_np(model(_x("cuda"))), expected)
    model.to("cpu")
    assert all(backend.device_of(a) == "cpu" for _, layer in lora_modules(model) for a in layer.base.stored().values())


def test_to_the_device_moves_a_nested_batchnorms_running_statistics(standin):
    model = nn.Sequential(nn.Conv2d(3, 4, 3, device="cpu"), nn.BatchNorm2d(4, device="cpu"))
    model.to("cuda")
    assert backend.device_of(model[1].running_mean) == backend.device_of(model[1].running_var) == "cuda"


def test_a_state_saved_before_the_merged_flag_loads_as_not_merged(tmp_path):
    model = apply_lora(_mlp(), 2, alpha=4)
    _train_adapters(model)
    old = {k: v for k, v in model.state_dict().items() if not k.endswith(".merged")}  # the old format
    tm.save(old, tmp_path / "old.npz")
    fresh = apply_lora(_mlp(seed=5), 2, alpha=4)
    fresh[0].merge()  # a merged model loading an unmerged state: the flag must be reset, not kept
    fresh.load_state_dict(tm.load(tmp_path / "old.npz"))
    assert not any(layer.merged for _, layer in lora_modules(fresh))
    with tm.no_grad():
        np.testing.assert_array_equal(to_np(fresh(_x())), to_np(model(_x())))


@pytest.mark.parametrize("flag", [np.array(5), np.array(np.nan), np.array("False"), "yes"])
def test_a_merged_flag_that_is_not_a_bool_is_refused_and_nothing_is_loaded(flag):
    model = apply_lora(_mlp(), 2)
    state = model.state_dict()
    state["0.lora_B"] = state["0.lora_B"] + 1
    state["0.merged"] = flag
    with pytest.raises(ValueError, match=r"0\.merged must be True or False"):
        model.load_state_dict(state)
    assert not model[0].merged and not to_np(model[0].lora_B).any()



def test_a_float16_model_stays_float16_after_an_nf4_layer_and_its_adapters():
    """As bitsandbytes' Linear4bit and PEFT: the NF4 product and the float32 adapters compute in
    float32 and hand the input's dtype on (float32 there doubled every activation after it)."""
    x16 = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float16)
    grads = {}
    for dtype in ("float16", "float32"):
        model = _mlp().to(dtype="float16").to(dtype=dtype)  # the same (float16-rounded) weights
        apply_qlora(model, 2, targets="0")
        model[0].lora_B.data[...] = 0.5
        x = tm.tensor(x16.astype(dtype), requires_grad=True)
        out = model(x)
        assert out.dtype == np.dtype(dtype) and model[0](x).dtype == np.dtype(dtype)
        out.sum().backward()
        assert x.grad.dtype == np.dtype(dtype)
        grads[dtype] = [to_np(p.grad).astype(np.float64) for p in trainable_parameters(model)]
        assert all(g.dtype == np.float32 for g in (model[0].lora_A.grad.data, model[0].lora_B.grad.data))
    for half, full in zip(grads["float16"], grads["float32"]):
        np.testing.assert_allclose(half, full, rtol=2e-2, atol=2e-2)


def test_a_merged_flag_for_an_nf4_base_is_refused_as_merge_refuses_it():
    model = apply_qlora(_mlp(), 2)
    state = model.state_dict()
    state["0.merged"] = np.array(True)
    with pytest.raises(ValueError, match="0.merged is True, but this layer's base is a NF4Linear"):
        model.load_state_dict(state)
    assert not model[0].merged
