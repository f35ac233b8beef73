"""GradScaler's settings, from its constructor or a loaded state: a value that would stop training
silently (a scale of 0, a growth_factor below 1, a tracker past the interval) or one of the
wrong type is refused with a message naming it, and a refused call changes nothing.

Before, load_state_dict took a scale of 0, NaN or inf (every later step skipped, the weights
never moved, no warning), growth_factor 0.5 and backoff_factor 0; a missing key was a bare
KeyError and None a TypeError about len(); the constructor took growth_factor=nan and raised
Python's own errors for strings."""
import math

import numpy as np
import pytest

import tinymem as tm
from tinymem import optim
from tinymem.techniques.precision import GradScaler

GOOD = {"scale": 8.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3, "_growth_tracker": 1}

BAD_FIELDS = [  # (key, value, error, message)
    ("scale", 0.0, ValueError, "finite number > 0"),
    ("scale", math.nan, ValueError, "finite number > 0"),
    ("scale", math.inf, ValueError, "finite number > 0"),
    ("scale", -4.0, ValueError, "finite number > 0"),
    ("scale", 1e39, ValueError, "float32 holds"),  # float32 rounds it to inf
    ("scale", 1e-50, ValueError, "finite number > 0"),  # float32 rounds it to 0
    ("scale", "8", TypeError, "must be a number"),
    ("scale", True, TypeError, "must be a number"),
    ("growth_factor", 0.5, ValueError, ">= 1.0"),
    ("growth_factor", math.nan, ValueError, ">= 1.0"),
    ("growth_factor", math.inf, ValueError, ">= 1.0"),
    ("growth_factor", None, TypeError, "must be a number"),
    ("growth_factor", "2", TypeError, "must be a number"),
    ("backoff_factor", 0.0, ValueError, r"in \(0, 1\]"),
    ("backoff_factor", 1.5, ValueError, r"in \(0, 1\]"),
    ("backoff_factor", math.nan, ValueError, r"in \(0, 1\]"),
    ("growth_interval", 0, ValueError, "positive integer"),
    ("growth_interval", 2.5, ValueError, "positive integer"),
    ("growth_interval", True, ValueError, "positive integer"),
    ("_growth_tracker", -1, ValueError, "count of clean steps"),
    ("_growth_tracker", 3, ValueError, "count of clean steps"),  # == growth_interval: never grows again
    ("_growth_tracker", 1.5, ValueError, "count of clean steps"),
]


def _step(scaler, w, opt, grad=1.0):
    """One scaled backward, step and update; whether the step ran (the weights moved)."""
    before = w.numpy().copy()
    opt.zero_grad()
    scaler.scale((w * grad).sum()).backward()
    scaler.step(opt)
    scaler.update()
    return not np.array_equal(w.numpy(), before)


def _trained_scaler():
    scaler = GradScaler(init_scale=4.0, growth_interval=5)
    w = tm.tensor(np.ones(2, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.1)
    assert _step(scaler, w, opt)
    return scaler, w, opt


@pytest.mark.parametrize("key, value, error, message", BAD_FIELDS, ids=[f"{k}={v!r}" for k, v, *_ in BAD_FIELDS])
def test_load_state_dict_refuses_a_bad_field_and_changes_nothing(key, value, error, message):
    scaler, w, opt = _trained_scaler()
    before = scaler.state_dict()
    with pytest.raises(error, match=f"load_state_dict: {key} .*{message}"):
        scaler.load_state_dict(dict(GOOD, **{key: value}))
    assert scaler.state_dict() == before
    assert _step(scaler, w, opt), "the scaler no longer steps after a refused load"
    assert scaler.state_dict()["_growth_tracker"] == before["_growth_tracker"] + 1


@pytest.mark.parametrize("state, error, message", [
    ({"scale": 1.0}, ValueError, r"lacks \['growth_factor', 'backoff_factor', 'growth_interval', '_growth_tracker'\]"),
    (None, TypeError, "takes the dict that GradScaler.state_dict.. returned, got NoneType"),
    ([("scale", 1.0)], TypeError, "got list"),
])
def test_load_state_dict_refuses_what_is_not_a_whole_state(state, error, message):
    scaler, w, opt = _trained_scaler()
    before = scaler.state_dict()
    with pytest.raises(error, match=message):
        scaler.load_state_dict(state)
    assert scaler.state_dict() == before and _step(scaler, w, opt)


def test_a_loaded_good_state_is_used():
    scaler, w, opt = _trained_scaler()
    scaler.load_state_dict(GOOD)
    assert scaler.state_dict() == GOOD
    assert _step(scaler, w, opt) and scaler.state_dict()["_growth_tracker"] == 2
    assert _step(scaler, w, opt) and scaler.get_scale() == 16.0  # the third clean step in a row grows it


CONSTRUCTOR = {  # the constructor's argument for each state key
    "scale": "init_scale", "growth_factor": "growth_factor", "backoff_factor": "backoff_factor",
    "growth_interval": "growth_interval"}


@pytest.mark.parametrize("key, value, error, message", [case for case in BAD_FIELDS if case[0] in CONSTRUCTOR],
                         ids=[f"{k}={v!r}" for k, v, *_ in BAD_FIELDS if k in CONSTRUCTOR])
def test_the_constructor_refuses_what_load_state_dict_refuses(key, value, error, message):
    name = CONSTRUCTOR[key]
    with pytest.raises(error, match=f"^{name}"):
        GradScaler(**{name: value})


@pytest.mark.parametrize("new_scale, error", [(1e39, ValueError), ("8", TypeError), (True, TypeError),
                                              (np.array([2.0, 4.0], np.float32), ValueError)])
def test_update_refuses_a_new_scale_float32_cannot_hold_or_not_a_number(new_scale, error):
    """update(1e39) set the scale to float32 inf (every later step skipped); "8" raised Python's
    "could not convert" and True set a scale of 1; a Tensor of two values raised "item() needs a
    tensor with one element", which does not name new_scale (PyTorch asks for a 1-element one)."""
    if isinstance(new_scale, np.ndarray):
        new_scale = tm.tensor(new_scale)
    scaler, w, opt = _trained_scaler()
    opt.zero_grad()
    scaler.scale((w * 1.0).sum()).backward()
    scaler.step(opt)
    before = scaler.state_dict()
    with pytest.raises(error, match="update.new_scale.: the scale must be a"):
        scaler.update(new_scale)
    assert scaler.state_dict() == before
    scaler.update(32.0)
    assert scaler.get_scale() == 32.0 and _step(scaler, w, opt)
