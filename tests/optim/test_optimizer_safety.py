"""Optimizers refuse what would train wrongly, and survive an OutOfMemoryError in step().

A bare tensor, a parameter given twice, NaN or negative hyper-parameters and a state saved from
other shapes are refused at once with a message; an error half way through creating the state
leaves no half-made state, so the retry the error suggests gives the clean step's result.
"""
import copy

import numpy as np
import pytest

import tinymem as tm
from tinymem import memory, optim
from tinymem.nn import Parameter
from tinymem.optim import table
from tinymem.optim.table import CONFIGS

OPTIONS = {"GaLore r=32": {"rank": 4}}
SHAPE = (64, 80)  # 5120 elements: 8-bit state in Adam8bit, projected in GaLore


def _make(label, params, **extra):
    cls, options = CONFIGS[label]
    return cls(params, lr=1e-2, **dict(options, **OPTIONS.get(label, {}), **extra))


def _param_and_grad(shape=SHAPE):
    rng = np.random.default_rng(0)
    return rng.standard_normal(shape).astype(np.float32), rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("label", list(CONFIGS))
def test_an_out_of_memory_error_in_the_first_step_leaves_no_half_made_state(label):
    w0, g = _param_and_grad()
    reference = Parameter(w0.copy())
    opt = _make(label, [reference])
    reference.grad = g.copy()
    opt.step()
    failures = 0
    for share in (0.0, 0.3, 0.6, 0.9):
        p = Parameter(w0.copy())
        opt = _make(label, [p])
        p.grad = g.copy()
        need = type(opt).bytes_for(SHAPE, 4, opt.param_groups[0]) + w0.nbytes
        try:
            with memory.track(budget=memory.live_bytes() + int(share * need), measure=False):
                opt.step()
        except tm.OutOfMemoryError:
            failures += 1
            assert np.array_equal(p.numpy(), w0), f"{label}: a failed step changed the weights"
            assert not opt.state, f"{label}: half-made state kept"
            assert opt.state_bytes() == table.fixed_bytes(opt)  # Adam8bit's maps belong to the optimizer
            opt.step()  # the retry the error message recommends
        np.testing.assert_array_equal(p.numpy(), reference.numpy(), err_msg=label)
    assert failures >= 1


def test_a_bare_tensor_is_refused_not_iterated():
    w = Parameter(np.ones((3, 2), np.float32))
    with pytest.raises(TypeError, match=r"one Tensor of shape \(3, 2\).*\[w\]"):
        optim.SGD(w, lr=0.1)
    with pytest.raises(TypeError, match="only optimize Tensors"):
        optim.SGD([np.ones(3, np.float32)], lr=0.1)


def test_a_tensor_inside_a_group_dict_is_taken_as_one_parameter():
    w = Parameter(np.ones((3, 2), np.float32))
    opt = optim.SGD([{"params": w}], lr=0.5)
    w.grad = np.ones((3, 2), np.float32)
    opt.step()
    np.testing.assert_array_equal(w.numpy(), np.full((3, 2), 0.5, np.float32))


def test_a_parameter_given_twice_is_refused():
    p, q = Parameter(np.ones(3, np.float32)), Parameter(np.ones(2, np.float32))
    with pytest.raises(ValueError, match="twice"):
        optim.SGD([p, p], lr=0.1)
    with pytest.raises(ValueError, match="twice"):
        optim.Adam([{"params": [p, q]}, {"params": [q], "lr": 1e-3}])


def test_a_non_leaf_tensor_is_refused():
    p = Parameter(np.ones(3, np.float32))
    with pytest.raises(ValueError, match="not a leaf"):
        optim.SGD([p * 2], lr=0.1)


@pytest.mark.parametrize("make, word", [
    (lambda ps: optim.SGD(ps, lr=float("nan")), "lr"),
    (lambda ps: optim.SGD(ps, lr=float("inf")), "lr"),
    (lambda ps: optim.SGD(ps, lr=True), "learning rate"),
    (lambda ps: optim.SGD(ps, lr=0.1, momentum=-1), "momentum"),
    (lambda ps: optim.SGD(ps, lr=0.1, weight_decay=float("nan")), "weight_decay"),
    (lambda ps: optim.SGD(ps, lr=0.1, dampening=-0.5), "dampening"),
    (lambda ps: optim.Adam(ps, eps=float("nan")), "eps"),
    (lambda ps: optim.Adam(ps, betas=(0.9, float("nan"))), "betas"),
    (lambda ps: optim.Adagrad(ps, lr_decay=-1.0), "lr_decay"),
    (lambda ps: optim.SGD([{"params": ps, "lr": float("nan")}], lr=0.1), "lr"),
])
def test_nan_inf_and_negative_hyper_parameters_are_refused(make, word):
    with pytest.raises(ValueError, match=word):
        make([Parameter(np.zeros(3, np.float32))])


def test_adafactor_keeps_its_negative_decay_exponent():
    optim.Adafactor([Parameter(np.zeros((3, 4), np.float32))], beta2_decay=-0.8)


@pytest.mark.parametrize("options, error, message", [
    # each raised Python's own TypeError ("'>' not supported ...", "'float' object is not subscriptable")
    ({"beta2_decay": "x"}, TypeError, "Adafactor: beta2_decay must be a number, got 'x'"),
    ({"eps": 1e-3}, TypeError, r"Adafactor: eps must be a pair \(eps1 or None, eps2\), got 0.001"),
    ({"eps": (None, "x")}, TypeError, r"Adafactor: eps\[1\] must be a number"),
    ({"d": "2"}, TypeError, "Adafactor: the clipping threshold d must be a number"),
    ({"weight_decay": None}, TypeError, "Adafactor: weight_decay must be a number, got None"),
    # accepted as d = 1
    ({"d": True}, TypeError, "the clipping threshold d must be a number, got True"),
])
def test_adafactor_refuses_options_of_the_wrong_type_by_name(options, error, message):
    with pytest.raises(error, match=message):
        optim.Adafactor([Parameter(np.zeros((3, 4), np.float32))], **options)


@pytest.mark.parametrize("options, error, message", [
    ({"eps": 1e-3}, TypeError, r"Adafactor: eps must be a pair \(eps1 or None, eps2\), got 0.001"),
    ({"d": 0.5}, ValueError, "the clipping threshold d must be >= 1, got 0.5"),
    ({"beta2_decay": 0.5}, ValueError, "beta2_decay must be <= 0, got 0.5"),
    ({"lr": float("nan")}, ValueError, "invalid learning rate lr=nan: it must be a finite number"),
])
def test_adafactor_options_are_checked_in_a_group_and_in_a_loaded_state(options, error, message):
    """A group's own options, and those a loaded state brings, are checked as the constructor's:
    before, a group's eps=1e-3 or a loaded one raised "'float' object is not subscriptable" at the
    first step, d=0.5 or beta2_decay=0.5 were taken, and a loaded lr of NaN made every weight NaN.
    A refused load changes nothing: the optimizer steps on with its own state."""
    w = Parameter(np.ones((3, 4), np.float32))
    with pytest.raises(error, match=message):
        optim.Adafactor([{"params": [w], **options}])
    opt = optim.Adafactor([w], lr=0.1)
    w.grad = np.ones((3, 4), np.float32)
    opt.step()
    saved = copy.deepcopy(opt.state_dict())
    saved["param_groups"][0].update(options)
    saved["state"][0]["step"] = 7
    with pytest.raises(error, match=message):
        opt.load_state_dict(saved)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.state[w]["step"] == 1
    opt.step()
    assert np.isfinite(w.numpy()).all() and opt.state[w]["step"] == 2


@pytest.mark.parametrize("cls, options, message", [
    (optim.SGD, {"momentum": 0.9, "nesterov": True, "dampening": 0.5}, "Nesterov momentum needs momentum > 0"),
    (optim.SGD, {"nesterov": True}, "Nesterov momentum needs momentum > 0"),
    (optim.RMSprop, {"alpha": 1.5}, r"invalid alpha 1.5: it must be in \[0, 1\]"),
])
def test_a_group_s_own_options_are_checked_as_the_constructor_s(cls, options, message):
    """SGD's nesterov rule and RMSprop's alpha were checked in the constructor only: a group of its
    own with dampening 0.5 stepped as no Nesterov SGD does, alpha=1.5 made every weight NaN."""
    with pytest.raises(ValueError, match=message):
        cls([{"params": [Parameter(np.ones(3, np.float32))], **options}], lr=0.1)


@pytest.mark.parametrize("label", list(CONFIGS))
@pytest.mark.parametrize("other", [(80, 64), (32, 80), (5,)])
def test_state_saved_from_other_shapes_is_refused_at_load(label, other):
    w, g = _param_and_grad()
    p = Parameter(w)
    opt = _make(label, [p])
    p.grad = g
    opt.step()
    saved = copy.deepcopy(opt.state_dict())
    fresh = _make(label, [Parameter(np.zeros(other, np.float32))])
    with pytest.raises(ValueError, match="other shapes"):
        fresh.load_state_dict(saved)
    assert fresh.state == {}  # nothing half-loaded
    del saved["param_groups"][0]["param_shapes"]  # a state dict that does not record shapes
    if any(hasattr(v, "shape") for v in saved["state"][0].values()) and other != (80, 64):
        with pytest.raises(ValueError, match="other shapes"):  # still caught by the bytes it needs
            fresh.load_state_dict(saved)


def test_a_foreign_state_dict_is_explained():
    opt = optim.Adam([Parameter(np.zeros(3, np.float32))])
    with pytest.raises(ValueError, match="'state' and 'param_groups'"):
        opt.load_state_dict({"param_groups": []})
    saved = opt.state_dict()
    saved["state"] = {5: {"step": 1}}
    with pytest.raises(ValueError, match="state for parameter 5"):
        opt.load_state_dict(saved)
