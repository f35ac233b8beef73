"""Optimizers against torch.optim (20 steps on random parameters and gradients), save/load
round trips that continue bit-identically, and the properties of Lion and GaLore.
(SGD with every option and plain Adam are checked against torch in test_optim_sgd_adam.py.)"""
import copy

import numpy as np
import pytest
from conftest import requires_torch

import tinymem as tm
from tinymem import backend, memory, optim
from tinymem.nn import Parameter
from tinymem.optim.table import CONFIGS

SHAPES = [(6, 5), (5,), (2, 3, 4)]
STEPS = 20
REL = 1e-6  # float32 after 20 steps: the two libraries round the same formulas differently


def _problem(shapes=SHAPES, steps=STEPS, seed=0):
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    grads = [[rng.standard_normal(s).astype(np.float32) for s in shapes] for _ in range(steps)]
    return params, grads


def _run_tinymem(make, params, grads, device):
    ps = [Parameter(backend.to_device(p.copy(), device)) for p in params]
    opt = make(ps)
    for step_grads in grads:
        for p, g in zip(ps, step_grads):
            p.grad = backend.to_device(g.copy(), device)
        opt.step()
        opt.zero_grad()
    return [p.numpy() for p in ps]


def _run_torch(make, params, grads):
    import torch
    ps = [torch.nn.Parameter(torch.from_numpy(p.copy())) for p in params]
    opt = make(ps)
    for step_grads in grads:
        for p, g in zip(ps, step_grads):
            p.grad = torch.from_numpy(g.copy())
        opt.step()
        opt.zero_grad()
    return [p.detach().numpy() for p in ps]


TORCH_CASES = {
    "Adagrad": ("Adagrad", {}),
    "Adagrad all": ("Adagrad", {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.1,
                                "initial_accumulator_value": 0.1, "eps": 1e-8}),
    "RMSprop": ("RMSprop", {}),
    "RMSprop momentum": ("RMSprop", {"momentum": 0.9, "weight_decay": 0.1}),
    "RMSprop centered": ("RMSprop", {"centered": True, "alpha": 0.9}),
    "RMSprop momentum centered": ("RMSprop", {"momentum": 0.5, "centered": True, "weight_decay": 0.1}),
    "Adam": ("Adam", {}),
    "Adam wd amsgrad": ("Adam", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
    "AdamW": ("AdamW", {"lr": 0.01}),
    "AdamW amsgrad": ("AdamW", {"lr": 0.01, "amsgrad": True, "weight_decay": 0.1, "betas": (0.8, 0.99)}),
    "Adafactor": ("Adafactor", {}),
    "Adafactor wd d": ("Adafactor", {"lr": 0.05, "weight_decay": 0.1, "d": 2.0, "eps": (1e-20, 1e-2)}),
}


@requires_torch
@pytest.mark.parametrize("case", list(TORCH_CASES))
def test_matches_torch_optim_after_20_steps(case, device):
    import torch
    name, options = TORCH_CASES[case]
    params, grads = _problem()
    ours = _run_tinymem(lambda ps: getattr(optim, name)(ps, **options), params, grads, device)
    ref = _run_torch(lambda ps: getattr(torch.optim, name)(ps, **options), params, grads)
    for a, b, start in zip(ours, ref, params):
        assert not np.array_equal(b, start), "the reference did not move: the test would be vacuous"
        rel = np.linalg.norm(a - b) / np.linalg.norm(b)
        assert rel <= REL, f"{case}: relative error {rel:.3g} > {REL} on shape {b.shape}"


@requires_torch
@pytest.mark.parametrize("name", ["SGD", "Adagrad", "RMSprop", "Adam", "AdamW", "Adafactor"])
def test_defaults_follow_pytorch(name):
    import inspect

    import torch
    ours = inspect.signature(getattr(optim, name).__init__).parameters
    theirs = inspect.signature(getattr(torch.optim, name).__init__).parameters
    for key, param in ours.items():
        if param.default is not inspect.Parameter.empty and key in theirs:
            assert param.default == theirs[key].default, f"{name}.{key}: {param.default} vs torch {theirs[key].default}"


def _lion_reference(params, grads, lr, betas, wd):
    ps = [p.astype(np.float64) for p in params]
    ms = [np.zeros_like(p) for p in ps]
    for step_grads in grads:
        for p, m, g in zip(ps, ms, step_grads):
            c = betas[0] * m + (1 - betas[0]) * g
            p *= 1 - lr * wd
            p -= lr * np.sign(c)
            m *= betas[1]
            m += (1 - betas[1]) * g
    return ps


def test_lion_matches_the_paper_in_float64(device):
    params, grads = _problem()
    opts = {"lr": 1e-3, "betas": (0.9, 0.99), "weight_decay": 0.5}
    ours = _run_tinymem(lambda ps: optim.Lion(ps, **opts), params, grads, device)
    ref = _lion_reference(params, grads, opts["lr"], opts["betas"], opts["weight_decay"])
    for a, b in zip(ours, ref):
        assert np.linalg.norm(a - b) / np.linalg.norm(b) <= 1e-6


def test_galore_update_stays_in_the_projected_subspace(device):
    rank = 3
    params, grads = _problem(shapes=[(20, 12), (12, 20)], steps=4)
    ps = [Parameter(backend.to_device(p.copy(), device)) for p in params]
    opt = optim.GaLore(ps, lr=1e-2, rank=rank, update_proj_gap=10)
    for step_grads in grads:
        for p, g in zip(ps, step_grads):
            p.grad = backend.to_device(g, device)
        opt.step()
    for p, start in zip(ps, params):
        moved = p.numpy() - start  # float32 rounding of p leaves singular values near 1e-7
        singular = np.linalg.svd(moved.astype(np.float64), compute_uv=False)
        assert singular[0] > 0
        assert singular[rank] <= 1e-4 * singular[0], f"update of rank > {rank}: {singular[:rank + 2]}"


ROUND_TRIP_SHAPES = [(64, 80), (80,), (3, 4)]  # (64, 80) has 5120 >= 4096 elements: 8-bit in Adam8bit
ROUND_TRIP_OPTIONS = {"GaLore r=32": {"rank": 4, "update_proj_gap": 2}}


def _resumed(label, device, shapes, steps, keep):
    """Train on ``steps`` gradients, and again from the state saved half way through (kept by
    ``keep``, state_dict -> what load_state_dict gets) by a fresh optimizer made with lr=0.5:
    (the parameters, the optimizer; the resumed parameters, their optimizer)."""
    cls, options = CONFIGS[label]
    options = dict(options, **ROUND_TRIP_OPTIONS.get(label, {}))
    params, grads = _problem(shapes, steps=steps)

    def run(ps, opt, chunk):
        for step_grads in chunk:
            for p, g in zip(ps, step_grads):
                p.grad = backend.to_device(g.copy(), device)
            opt.step()

    ps = [Parameter(backend.to_device(p.copy(), device)) for p in params]
    opt = cls(ps, lr=1e-2, **options)
    run(ps, opt, grads[:steps // 2])
    saved_params = [p.numpy().copy() for p in ps]
    saved = keep(opt.state_dict())
    run(ps, opt, grads[steps // 2:])

    fresh = [Parameter(backend.to_device(p, device)) for p in saved_params]
    reloaded = cls(fresh, lr=0.5)
    reloaded.load_state_dict(saved)
    assert reloaded.param_groups[0]["lr"] == 1e-2, "load_state_dict must restore the hyper-parameters"
    run(fresh, reloaded, grads[steps // 2:])
    for a, b in zip(ps, fresh):
        assert np.array_equal(a.numpy(), b.numpy()), f"{label}: resumed run differs"
    assert reloaded.state_bytes() == opt.state_bytes()


@pytest.mark.parametrize("label", list(CONFIGS))
def test_state_dict_round_trip_continues_bit_identically(label, device):
    _resumed(label, device, ROUND_TRIP_SHAPES, 6, copy.deepcopy)


@pytest.mark.parametrize("label", list(CONFIGS))
def test_a_scalar_parameter_resumes_from_a_saved_state_bit_identically(label, device, tmp_path):
    """A 0-d parameter's state buffers are 0-d arrays; saved and loaded (through tm.save and
    tm.load) they come back as arrays on the parameter's device. Before, load_state_dict took
    every 0-d array for a counter and made it a Python float: Adam, RMSprop, Lion, Adafactor and
    Adam8bit raised at the next step, SGD momentum and Adagrad went on from a wrong value."""
    def through_a_file(state):
        tm.save(state, tmp_path / "opt.tm")
        return tm.load(tmp_path / "opt.tm")

    _resumed(label, device, [(), (3,)], 4, through_a_file)


def test_load_state_dict_rejects_another_layout():
    a = optim.Adam([Parameter(np.zeros(3, np.float32))])
    b = optim.Adam([Parameter(np.zeros(3, np.float32)), Parameter(np.zeros(2, np.float32))])
    with pytest.raises(ValueError, match="different parameter layout"):
        a.load_state_dict(b.state_dict())


@requires_torch
@pytest.mark.parametrize("case", list(TORCH_CASES))
def test_a_scalar_parameter_steps_as_in_torch(case):
    """A 0-d parameter (a learned temperature, say): NumPy arithmetic on it gives scalars,
    which the in-place update must not trip over."""
    import torch
    name, options = TORCH_CASES[case]
    params, grads = _problem(shapes=[(), (3,)], steps=5)
    ours = _run_tinymem(lambda ps: getattr(optim, name)(ps, **options), params, grads, "cpu")
    ref = _run_torch(lambda ps: getattr(torch.optim, name)(ps, **options), params, grads)
    assert ours[0].shape == ()
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-5)


def test_lion_steps_a_scalar_parameter_as_the_paper():
    params, grads = _problem(shapes=[()], steps=5)
    opts = {"lr": 1e-2, "betas": (0.9, 0.99), "weight_decay": 0.1}
    ours = _run_tinymem(lambda ps: optim.Lion(ps, **opts), params, grads, "cpu")
    ref = _lion_reference(params, grads, opts["lr"], opts["betas"], opts["weight_decay"])
    np.testing.assert_allclose(ours[0], ref[0], rtol=1e-6)


def test_per_group_options_of_galore_and_adam8bit_win_over_the_constructor():
    a, b = Parameter(np.ones((8, 8), np.float32)), Parameter(np.ones((8, 8), np.float32))
    galore = optim.GaLore([{"params": [a], "rank": 2, "scale": 1.0}, {"params": [b]}], lr=0.01, rank=4)
    assert [(g["rank"], g["scale"]) for g in galore.param_groups] == [(2, 1.0), (4, 0.25)]
    opt = optim.Adam8bit([{"params": [a], "min_8bit_size": 0, "block_size": 16}, {"params": [b]}], lr=0.01)
    a.grad, b.grad = np.ones((8, 8), np.float32), np.ones((8, 8), np.float32)
    opt.step()
    assert "exp_avg_codes" in opt.state[a] and opt.state[a]["exp_avg_absmax"].shape == (4,)  # 64 / 16 blocks
    assert "exp_avg" in opt.state[b]  # 64 values < the default min_8bit_size: 32-bit state
    with pytest.raises(ValueError, match="rank"):
        optim.GaLore([{"params": [a], "rank": 0}], lr=0.01)
    with pytest.raises(ValueError, match="qmap"):
        optim.Adam8bit([{"params": [a], "qmap": "log"}], lr=0.01)


@pytest.mark.parametrize("make", [lambda ps: optim.Adafactor(ps, d=0.5),
                                  lambda ps: optim.Adam8bit(ps, qmap="log"),
                                  lambda ps: optim.RMSprop(ps, alpha=1.5)])
def test_bad_hyper_parameters_say_what_is_wrong(make):
    with pytest.raises(ValueError):
        make([Parameter(np.zeros(3, np.float32))])


def test_zero_grad_and_skipping_parameters_without_grad():
    p, q = Parameter(np.ones(3, np.float32)), Parameter(np.ones(2, np.float32))
    opt = optim.AdamW([p, q], lr=0.1)
    p.grad = np.ones(3, np.float32)
    opt.step()
    assert q not in opt.state and np.array_equal(q.numpy(), np.ones(2, np.float32))
    opt.zero_grad()
    assert p.grad is None
    tm.manual_seed(0)


@pytest.mark.parametrize("label", list(CONFIGS))
def test_every_optimizer_plugs_into_state_offload(label):
    """The offload seam (update_place, state_array, scratch) works for each optimizer: the
    same weights, and the state counted on the host instead of the device."""
    from tinymem.techniques import offload
    cls, options = CONFIGS[label]
    options = dict(options, **ROUND_TRIP_OPTIONS.get(label, {}))
    params, grads = _problem(ROUND_TRIP_SHAPES, steps=3)
    results = []
    for place in (None, "host"):
        ps = [Parameter(p.copy()) for p in params]
        opt = cls(ps, lr=1e-2, **options)
        if place:
            before = memory.live_bytes("optimizer", "device")
            opt = offload.offload_optimizer(opt, place)
        for step_grads in grads:
            for p, g in zip(ps, step_grads):
                p.grad = g.copy()
            opt.step()
        if place:
            assert memory.live_bytes("optimizer", "device") == before
            assert memory.live_bytes("optimizer", "host") >= opt.state_bytes()
        results.append([p.numpy().copy() for p in ps])
    for a, b in zip(*results):
        assert np.array_equal(a, b), label


def test_adam8bit_steps_a_zero_size_parameter_beside_others(device):
    """An empty parameter (an unused embedding of 0 rows) in the 8-bit path: nothing to step,
    its neighbour stepped as without it (the CPU path looped with a chunk of 0: range raised)."""
    rng = np.random.default_rng(0)
    full = rng.standard_normal(4096).astype(np.float32)
    results = []
    for shapes in (((0,), (4096,)), ((4096,),)):
        ps = [Parameter(backend.to_device(np.zeros(s, np.float32) if s == (0,) else full.copy(), device))
              for s in shapes]
        opt = optim.Adam8bit(ps, min_8bit_size=0)
        for _ in range(2):
            for p in ps:
                p.grad = backend.to_device(np.ones(p.shape, np.float32), device)
            opt.step()
        results.append(backend.to_numpy(ps[-1].data))
        assert opt.state[ps[0]]["step"] == 2
    assert np.array_equal(results[0], results[1]) and not np.array_equal(results[0], full)


def test_adafactor_on_a_device_equals_the_cpu_bit_for_bit(standin):
    """The device keeps its RMS as 0-d arrays (no host sync); the update's scale must still
    multiply as a float32, as the CPU's Python float does (was float64: 1 ulp apart)."""
    rng = np.random.default_rng(0)
    params = [rng.standard_normal(s).astype(np.float32) for s in ((7, 5), (4096,), (5000,))]
    grads = [[rng.standard_normal(p.shape).astype(np.float32) for p in params] for _ in range(3)]
    cpu, dev = (_run_tinymem(lambda ps: optim.Adafactor(ps, weight_decay=0.1), params, grads, device)
                for device in ("cpu", "cuda"))
    for a, b in zip(cpu, dev):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
