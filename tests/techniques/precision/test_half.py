"""Mixed precision: half storage in the ledger, fp32 masters, loss scaling, digits accuracy."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import backend, data, memory, models, optim
from tinymem.techniques import precision

HALF = ["float16", "bfloat16"]
# Gradients of a half run against float32 at the same (rounded) weights: saved activations and
# the gradient are rounded once each, so the error is a few units of the format's precision
# (2^-11 for float16, 2^-8 for bfloat16) relative to the largest gradient entry.
GRAD_TOL = {"float16": 5e-3, "bfloat16": 4e-2}


# -- fp16 facts, as tests --------------------------------------------------------------------------
def test_small_gradient_underflows_in_fp16_and_survives_scaled():
    g = np.float32(1e-8)
    assert np.float16(g) == 0
    assert np.float16(g * 2**16) != 0
    assert abs(float(np.float16(g * 2**16)) / 2**16 - 1e-8) < 1e-3 * 1e-8 * 2**4


def test_small_update_rounds_away_in_fp16_which_is_why_masters_are_fp32():
    assert np.float16(1.0) + np.float16(1e-4) == np.float16(1.0)
    assert np.float32(1.0) + np.float32(1e-4) != np.float32(1.0)


def test_fp16_range_constants():
    info = np.finfo(np.float16)
    assert precision.FP16_MAX == float(info.max) == 65504.0
    assert precision.FP16_MIN_NORMAL == float(info.tiny)
    assert precision.FP16_MIN_SUBNORMAL == float(info.smallest_subnormal)
    with np.errstate(over="ignore"):
        assert np.float16(65520.0) == np.inf and np.float16(65519.0) == 65504.0


def test_fp16_range_report_counts():
    g = np.array([0.0, 1e-9, 1e-6, 1e-3, 1.0, 70000.0, 1e30], np.float32)
    r = precision.fp16_range_report([g])
    assert r["count"] == 7 and r["zero"] == pytest.approx(1 / 7)
    assert r["underflow"] == pytest.approx(1 / 7)          # 1e-9
    assert r["subnormal"] == pytest.approx(1 / 7)          # 1e-6
    assert r["overflow"] == pytest.approx(2 / 7)           # 7e4, 1e30
    scaled = precision.fp16_range_report([tm.tensor(g)], scale=2.0**16)
    assert scaled["underflow"] == 0 and scaled["subnormal"] == 0  # 1e-9 * 65536 = 6.6e-5 is normal
    assert scaled["overflow"] == pytest.approx(3 / 7)      # 1.0 * 65536 overflows too


def test_fp16_range_report_reads_a_parameters_gradient_and_skips_one_without():
    layer = tm.nn.Linear(4, 4)
    layer.weight.data[...] = 1e6  # weights that would overflow, if they were counted by mistake
    assert precision.fp16_range_report(layer.parameters())["count"] == 0  # no backward yet
    layer.weight.grad = np.full((4, 4), 1e-9, np.float32)
    r = precision.fp16_range_report(layer.parameters())  # the bias still has no gradient
    assert r["count"] == 16 and r["underflow"] == 1.0 and r["overflow"] == 0.0


# -- the ledger shows half bytes ---------------------------------------------------------------------
def _batch(n=32, device=None):
    x, y, _, _ = data.load_digits()
    return tm.tensor(x[:n].copy(), device=device), tm.tensor(y[:n].copy(), device=device)


@pytest.mark.parametrize("dtype", HALF)
def test_parameters_gradients_and_saved_activations_are_half(dtype, device):
    x, y = _batch(device=device)
    tm.manual_seed(0)
    ref = models.MLP([64, 48, 32, 10]).to(device)
    base = memory.live_bytes("activation")
    out = ref(x)
    act32 = memory.live_bytes("activation") - base
    del out

    tm.manual_seed(0)
    model = models.MLP([64, 48, 32, 10]).to(device)
    n = model.num_parameters()
    opt = optim.SGD(model.parameters(), lr=0.1)
    before = memory.live_bytes("parameter")
    hmodel, hopt = precision.half(model, opt, dtype=dtype)
    assert before - memory.live_bytes("parameter") == 2 * n, memory.format_table(memory.LEDGER.by_bucket())
    assert hopt.state_bytes() == 4 * n  # SGD without momentum: only the fp32 masters
    out = hmodel(x)
    assert out.dtype == np.float32
    act16 = memory.live_bytes("activation") - base
    assert act16 * 2 == act32, (act16, act32, memory.format_table(memory.LEDGER.by_bucket()))
    loss = F.cross_entropy(out, y)
    del out
    loss.backward()
    assert memory.live_bytes("activation") == base
    grads = [p.grad for p in model.parameters()]
    assert all(g.dtype == (np.float16 if dtype == "float16" else np.uint16) for g in grads)
    assert sum(g.nbytes for g in grads) == 2 * n


@pytest.mark.parametrize("dtype", HALF)
def test_gradients_match_float32_at_the_rounded_weights(dtype):
    x, y = _batch(64)
    model = models.MLP([64, 32, 32, 10])
    hmodel = precision.half(model, dtype=dtype)
    ref = models.MLP([64, 32, 32, 10])
    ref.load_state_dict(hmodel.float_state_dict())
    F.cross_entropy(ref(x), y).backward()
    F.cross_entropy(hmodel(x), y).backward()
    fmt = precision.get_format(dtype)
    for p, r in zip(model.parameters(), ref.parameters()):
        ours = backend.to_numpy(fmt.decode(p.grad.data))
        exact = r.grad.numpy()
        assert np.abs(ours - exact).max() <= GRAD_TOL[dtype] * np.abs(exact).max()


@pytest.mark.parametrize("dtype", HALF)
def test_updates_go_to_fp32_masters_and_are_copied_back(dtype):
    w = np.ones((1, 4), np.float32)
    model = tm.nn.Linear(4, 1, bias=False)
    model.weight.data = tm.tensor(w).data  # on the default device, where the layer is
    opt = optim.SGD(model.parameters(), lr=1e-4)
    hmodel, hopt = precision.half(model, opt, dtype=dtype)
    x = tm.tensor(np.ones((1, 4), np.float32))
    for _ in range(100):
        hopt.zero_grad()
        hmodel(x).sum().backward()   # gradient 1 per weight: each step subtracts 1e-4
        hopt.step()
    master = hopt.master_params()[0].numpy()
    np.testing.assert_allclose(master, 0.99, rtol=1e-5)
    fmt = precision.get_format(dtype)
    weight = backend.to_numpy(fmt.decode(model.weight.data))
    assert np.array_equal(weight, fmt.decode(fmt.encode(master)))
    assert (weight < 1.0).all()   # the small steps added up
    direct = fmt.decode(fmt.encode(np.ones(1, np.float32)))
    for _ in range(100):  # the same hundred steps applied to the half weight itself get lost
        direct = fmt.decode(fmt.encode(direct - np.float32(1e-4)))
    assert direct[0] == 1.0


def test_scaler_rescues_gradients_that_underflow_in_fp16():
    x = tm.tensor(np.full((1, 4), 1e-3, np.float32))
    results = {}
    for scale in (False, True):
        model = tm.nn.Linear(4, 1, bias=False)
        opt = optim.SGD(model.parameters(), lr=1.0)
        hmodel, hopt = precision.half(model, opt, dtype="float16")
        scaler = precision.GradScaler(enabled=scale)
        scaler.scale(hmodel(x).sum() * 1e-5).backward()  # true gradient 1e-8 per weight
        scaler.unscale_(hopt)
        hopt.copy_grads_to_masters()  # unscale_ does it; a disabled scaler does nothing
        results[scale] = hopt.master_params()[0].grad.numpy()
        scaler.step(hopt)
        scaler.update()
    assert (results[False] == 0).all()
    np.testing.assert_allclose(results[True], 1e-8, rtol=1e-3)


@pytest.mark.parametrize("dtype", HALF)
def test_gradient_between_modules_underflows_in_fp16_only(dtype):
    """On the CPU the gradient leaving each module is rounded to the half format, as a GPU
    computing in half would hold it: 1e-9 is 0 in float16 and survives in bfloat16."""
    model = models.MLP([4, 4, 1])
    hmodel = precision.half(model, dtype=dtype)
    (hmodel(tm.tensor(np.ones((2, 4), np.float32))).sum() * 1e-9).backward()
    fmt = precision.get_format(dtype)
    zero = [bool((fmt.decode(p.grad.data) == 0).all()) for p in model.parameters()]
    assert all(zero) if dtype == "float16" else not any(zero)


def test_overflow_skips_the_step_and_halves_the_scale():
    model = tm.nn.Linear(2, 1, bias=False)
    opt = optim.SGD(model.parameters(), lr=0.1)
    hmodel, hopt = precision.half(model, opt, dtype="float16")
    before = hopt.master_params()[0].numpy().copy()
    scaler = precision.GradScaler()
    x = tm.tensor(np.array([[1.0, 2.0]], np.float32))
    scaler.scale(hmodel(x).sum()).backward()   # 2 * 65536 overflows float16
    assert np.isinf(model.weight.grad.numpy()).any()
    scaler.step(hopt)
    scaler.update()
    assert np.array_equal(before, hopt.master_params()[0].numpy())
    assert scaler.get_scale() == 2.0**15


def test_master_optimizer_state_dict_round_trip():
    model = models.MLP([4, 3, 2])
    opt = optim.Adam(model.parameters(), lr=1e-2)
    hmodel, hopt = precision.half(model, opt, dtype="bfloat16")
    x = tm.tensor(np.ones((2, 4), np.float32))
    hmodel(x).sum().backward()
    hopt.step()
    state = hopt.state_dict()
    other_model = models.MLP([4, 3, 2])
    other_h, other_opt = precision.half(other_model, optim.Adam(other_model.parameters(), lr=1e-2), "bf16")
    other_opt.load_state_dict(state)
    for a, b in zip(hopt.master_params(), other_opt.master_params()):
        assert np.array_equal(a.numpy(), b.numpy())
    for a, b in zip(model.parameters(), other_model.parameters()):
        assert np.array_equal(a.numpy(), b.numpy())
    with pytest.raises(ValueError, match="float16"):
        fp16_model = models.MLP([4, 3, 2])
        precision.half(fp16_model, optim.Adam(fp16_model.parameters()), "float16")[1].load_state_dict(state)


def test_bad_use_explains():
    model = models.MLP([4, 3, 2])
    with pytest.raises(ValueError, match="float16' or 'bfloat16"):
        precision.half(model, dtype="int8")
    precision.half(model)
    with pytest.raises(TypeError, match="already"):
        precision.half(model)
    other = models.MLP([4, 3, 2])
    with pytest.raises(ValueError, match="not a parameter of the model"):
        precision.half(models.MLP([4, 3, 2]), optim.SGD(other.parameters(), lr=0.1))


# -- training reaches fp32 accuracy -------------------------------------------------------------------
def test_fp16_dynamic_and_bf16_reach_fp32_accuracy_on_digits():
    """Mean test accuracy over 2 seeds (900 test images: one image is 0.11 points)."""
    from tinymem.experiments.precision import train_digits
    modes = {"float32": None, "float16": {}, "bfloat16": None}
    acc = {m: np.mean([train_digits(m, 6, kw, seed)["accuracy"] for seed in (0, 1)]) for m, kw in modes.items()}
    assert acc["float32"] > 93, acc
    assert abs(acc["float16"] - acc["float32"]) <= 0.5, acc
    assert abs(acc["bfloat16"] - acc["float32"]) <= 1.0, acc
