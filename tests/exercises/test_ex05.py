import math

import numpy as np
import pytest

from tinymem import optim
from tinymem.nn import Parameter
from tinymem.optim import blockwise, table

pytestmark = pytest.mark.exercise_05

LABELS = {"sgd": "SGD", "sgd_momentum": "SGD momentum", "adam": "Adam", "adafactor": "Adafactor",
          "adam8bit": "Adam8bit"}


@pytest.mark.parametrize("name", list(LABELS))
@pytest.mark.parametrize("shape", [(7,), (4095,), (64, 64), (512, 10), (3, 40, 50)])
def test_state_bytes_match_tinymems_table(exercise, name, shape):
    expected = table.bytes_per_param(LABELS[name], shape) * math.prod(shape)
    assert exercise("ex05").state_bytes_for(name, shape) == expected


def test_adafactor_variance_matches_the_optimizer(exercise):
    rng = np.random.default_rng(0)
    a, b = rng.uniform(0.5, 2, (6, 1)), rng.uniform(0.5, 2, (1, 9))
    grad = np.sqrt(a @ b).astype(np.float32)  # g^2 is rank 1: the factorisation is exact
    p = Parameter(np.ones((6, 9), np.float32))
    opt = optim.Adafactor([p], lr=0.0)
    p.grad = grad
    opt.step()  # at step 1 beta2_t = 0: the factors are the row and column means of g^2
    state = opt.state[p]
    rebuilt = exercise("ex05").adafactor_variance(state["row_var"], state["col_var"], 1e-30)
    np.testing.assert_allclose(rebuilt, grad.astype(np.float64) ** 2, rtol=1e-5)


@pytest.mark.parametrize("kind", ["dynamic", "linear"])
def test_quantize_block_matches_blockwise(exercise, kind):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(512) * np.exp(rng.uniform(-6, 0, 512))).astype(np.float32)
    qmap = blockwise.MAPS[kind](True)
    codes, absmax = exercise("ex05").quantize_block(x, qmap)
    ref_codes, ref_absmax = blockwise.quantize(x, qmap, x.size)
    assert codes.dtype == np.uint8 and absmax == pytest.approx(float(ref_absmax[0]))
    # ties between two map values may go either way; the error may not exceed half a gap
    assert np.all(np.abs(qmap[codes] * absmax - x) <= np.abs(qmap[ref_codes] * absmax - x) + 1e-7)


def test_lion_step_matches_the_optimizer(exercise):
    rng = np.random.default_rng(2)
    p0, g1, g2 = (rng.standard_normal((5, 4)).astype(np.float32) for _ in range(3))
    p = Parameter(p0.copy())
    opt = optim.Lion([p], lr=0.01, betas=(0.8, 0.95), weight_decay=0.3)
    new_p, m = p0.astype(np.float64), np.zeros((5, 4))
    for g in (g1, g2):
        p.grad = g
        opt.step()
        new_p, m = exercise("ex05").lion_step(new_p, m, g, 0.01, (0.8, 0.95), 0.3)
    np.testing.assert_allclose(p.numpy(), new_p, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(opt.state[p]["exp_avg"], m, rtol=1e-5, atol=1e-7)
