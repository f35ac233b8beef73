"""Techniques combined: each pair must train as the simpler run does (bit for bit where exact)."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem.techniques import offload, precision


def _data():
    rng = np.random.default_rng(0)
    return tm.tensor(rng.standard_normal((8, 6)).astype(np.float32)), rng.integers(0, 3, 8)


def _half_weights(dtype, wrap_optimizer, steps=3):
    """Half-precision Adam training; ``wrap_optimizer`` may offload the optimizer first."""
    tm.manual_seed(0)
    model = tm.models.MLP([6, 16, 3], activation="gelu", layernorm=True)
    half_model, opt = precision.half(model, wrap_optimizer(tm.optim.Adam(model.parameters(), lr=1e-2)), dtype)
    x, y = _data()
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(half_model(x), y).backward()
        opt.step()
    return list(half_model.float_state_dict().values())


@pytest.mark.parametrize("place", ["host", "disk"])
def test_half_model_with_an_offloaded_optimizer_trains_as_without_offload(place):
    """half(model, offload_optimizer(opt)) raised AttributeError (MasterOptimizer re-keys the
    state through the wrapper, whose ``state`` had no setter)."""
    plain = _half_weights("bfloat16", lambda opt: opt)
    offloaded = _half_weights("bfloat16", lambda opt: offload.offload_optimizer(opt, place=place))
    for a, b in zip(plain, offloaded):
        np.testing.assert_array_equal(a, b)


def test_offloading_the_master_optimizer_is_refused():
    """offload_optimizer(MasterOptimizer) stepped nothing, silently: its parameters are the
    masters, whose gradients only MasterOptimizer.step copies in."""
    model = tm.models.MLP([6, 3])
    _, opt = precision.half(model, tm.optim.Adam(model.parameters()), "bfloat16")
    with pytest.raises(TypeError, match=r"half\(model, offload_optimizer\(opt\)\)"):
        offload.offload_optimizer(opt)
