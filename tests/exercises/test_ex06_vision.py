"""Checks for lesson 6 (vision), held against tinymem's own conv, micro-batching and finder."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import models
from tinymem.techniques.microbatch import accumulate_gradients, split_batch

pytestmark = pytest.mark.exercise_06


def test_im2col_bytes(exercise):
    # 32 channels, 3x3, 512 px, batch 8: the 2.4 GB of the lesson.
    assert exercise("ex06_vision").im2col_bytes(8, 32, 3, 512, 512) == 4 * 32 * 9 * 512 * 512 * 8
    assert exercise("ex06_vision").im2col_bytes(1, 1, 1, 2, 3, itemsize=2) == 12


@pytest.mark.parametrize("stride,padding", [(1, 0), (1, 1), (2, 1)])
def test_conv2d_im2col_matches_tinymem(exercise, stride, padding):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 3))
    ours = exercise("ex06_vision").conv2d_im2col(x, w, stride, padding)
    np.testing.assert_allclose(ours, F.conv2d(tm.tensor(x), tm.tensor(w), stride=stride, padding=padding).numpy(),
                               rtol=1e-10, atol=1e-10)


def test_microbatch_weights_give_the_full_gradient(exercise):
    rng = np.random.default_rng(0)
    model = models.MLP([4, 8, 3]).to(dtype="float64")
    x, y = tm.tensor(rng.standard_normal((10, 4))), tm.tensor(rng.integers(0, 3, 10))
    accumulate_gradients(lambda a, b: F.cross_entropy(model(a), b), (x, y), micro_batch_size=4)
    full = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    slices = split_batch(10, micro_batch_size=4)
    weights = exercise("ex06_vision").microbatch_weights([s.stop - s.start for s in slices])
    for s, wgt in zip(slices, weights):
        (F.cross_entropy(model(tm.tensor(x.data[s])), tm.tensor(y.data[s])) * wgt).backward()
    for p, ref in zip(model.parameters(), full):
        np.testing.assert_allclose(p.grad.numpy(), ref, rtol=1e-10)


@pytest.mark.parametrize("answer", [1, 2, 37, 64, 999])
def test_largest_fitting(exercise, answer):
    calls = []

    def fits(n):
        calls.append(n)
        return n <= answer

    assert exercise("ex06_vision").largest_fitting(fits, 1, 1000) == answer
    assert len(calls) <= 11
