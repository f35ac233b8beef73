"""Checks for lesson 5, held against tinymem's optimizers (themselves held against PyTorch)."""
import math

import numpy as np
import pytest
from conftest import subclasses

from tinymem import optim
from tinymem.nn import Parameter
from tinymem.optim import blockwise, table
from tinymem.planner import states

pytestmark = pytest.mark.exercise_05

LABELS = {"sgd": "SGD", "sgd_momentum": "SGD momentum", "adam": "Adam", "adafactor": "Adafactor",
          "adam8bit": "Adam8bit"}


def forbid_the_formulas(forbid):
    forbid(table.bytes_per_param, table.expected_state_bytes, table.table, table.fixed_bytes,
           states.optimizer_state_bytes, states.model_states)
    forbid(*[(cls, "bytes_for") for cls in subclasses(optim.Optimizer) if "bytes_for" in vars(cls)])


@pytest.mark.parametrize("name", list(LABELS))
def test_state_bytes_match_tinymems_table(exercise, forbid, name):
    shapes = [(7,), (4095,), (4096,), (64, 64), (512, 10), (3, 40, 50), (2049, 3)]
    expected = {shape: table.bytes_per_param(LABELS[name], shape) * math.prod(shape) for shape in shapes}
    forbid_the_formulas(forbid)
    mod = exercise("ex05")
    for shape in shapes:
        assert mod.state_bytes_for(name, shape) == expected[shape], shape


def _adafactor_run(grads, eps1):
    p = Parameter(np.ones(grads[0].shape, np.float32))
    opt = optim.Adafactor([p], lr=0.0, eps=(eps1, 1e-3))
    for g in grads:
        p.grad = g
        opt.step()
    state = opt.state[p]
    return state["row_var"].astype(np.float64) @ state["col_var"] / max(float(state["row_var"].mean()), eps1)


def test_adafactor_second_moment_is_exact_for_a_rank_one_square(exercise, forbid):
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 2, (6, 1)), rng.uniform(0.5, 2, (1, 9))
    grad = np.sqrt(a @ b).astype(np.float32)  # g^2 is rank 1: the factorisation is exact
    forbid((optim.Adafactor, "update_parameter"), (optim.Adafactor, "step"))
    rebuilt = exercise("ex05").adafactor_second_moment([grad], 1e-30)
    np.testing.assert_allclose(rebuilt, grad.astype(np.float64) ** 2, rtol=1e-5)


@pytest.mark.parametrize("steps,eps1", [(4, 1e-30), (3, 1e3)])
def test_adafactor_second_moment_follows_the_optimizer(exercise, forbid, steps, eps1):
    rng = np.random.default_rng(steps)
    grads = [(rng.standard_normal((5, 7)) * rng.uniform(0.1, 3, (5, 1))).astype(np.float32) for _ in range(steps)]
    expected = _adafactor_run(grads, eps1)
    forbid((optim.Adafactor, "update_parameter"), (optim.Adafactor, "step"))
    np.testing.assert_allclose(exercise("ex05").adafactor_second_moment(grads, eps1), expected, rtol=1e-5)


@pytest.mark.parametrize("kind", ["dynamic", "linear"])
def test_quantize_block_matches_blockwise(exercise, forbid, kind):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(512) * np.exp(rng.uniform(-6, 0, 512))).astype(np.float32)
    largest = np.argmax(np.abs(x))
    x[largest] = -abs(x[largest])  # the largest magnitude is negative
    qmap = blockwise.MAPS[kind](True)
    ref_codes, ref_absmax = blockwise.quantize(x, qmap, x.size)
    forbid(blockwise.quantize, blockwise.dequantize)
    codes, absmax = exercise("ex05").quantize_block(x, qmap)
    assert codes.dtype == np.uint8 and codes.shape == x.shape and absmax == pytest.approx(float(ref_absmax[0]))
    # ties between two map values may go either way; the error may not exceed half a gap
    assert np.all(np.abs(qmap[codes] * absmax - x) <= np.abs(qmap[ref_codes] * absmax - x) + 1e-7)


def test_lion_step_matches_the_optimizer(exercise, forbid):
    rng = np.random.default_rng(2)
    p0, g1, g2 = (rng.standard_normal((5, 4)).astype(np.float32) for _ in range(3))
    p = Parameter(p0.copy())
    opt = optim.Lion([p], lr=0.01, betas=(0.8, 0.95), weight_decay=0.3)
    expected = []
    for g in (g1, g2):
        p.grad = g
        opt.step()
        expected.append((p.numpy().copy(), opt.state[p]["exp_avg"].copy()))
    forbid((optim.Lion, "update_parameter"), (optim.Lion, "step"))
    new_p, m = p0.astype(np.float64), np.zeros((5, 4))
    for g, (want_p, want_m) in zip((g1, g2), expected):
        inputs = (new_p, m, g)
        before = [a.copy() for a in inputs]
        new_p, m = exercise("ex05").lion_step(new_p, m, g, 0.01, (0.8, 0.95), 0.3)
        assert all(np.array_equal(a, b) for a, b in zip(inputs, before)), "return new arrays: leave p, m, g as they are"
        np.testing.assert_allclose(new_p, want_p, rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(m, want_m, rtol=1e-5, atol=1e-7)
