"""Checks for lesson 6 (vision), held against tinymem's own conv, micro-batching and finder."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import models
from tinymem.ops import conv as conv_ops
from tinymem.techniques import batch_size, microbatch
from tinymem.techniques.microbatch import accumulate_gradients, split_batch

pytestmark = pytest.mark.exercise_06


@pytest.mark.parametrize("batch,channels,kernel,size,limit,dtype", [
    (8, 3, 3, 10, 10_000, "float32"),   # several whole samples per block
    (7, 3, 3, 10, 6_000, "float32"),    # the last block holds fewer samples than the others
    (2, 4, 3, 12, 900, "float32"),      # one sample does not fit: bands of rows
    (1, 8, 5, 9, 100, "float32"),       # not even one row fits: one row per band
    (3, 2, 1, 6, 10 ** 6, "float32"),   # everything in one block
    (2, 4, 3, 12, 900, "float64"),      # 8 bytes a value
])
def test_column_block_bytes_match_the_blocks_conv2d_builds(exercise, forbid, monkeypatch, batch, channels,
                                                           kernel, size, limit, dtype):
    monkeypatch.setattr(conv_ops, "WORKSPACE_ELEMENTS", limit)
    built, im2col = [], conv_ops._im2col
    monkeypatch.setattr(conv_ops, "_im2col", lambda *args: built.append(im2col(*args)) or built[-1])
    x = tm.tensor(np.ones((batch, channels, size, size), dtype))
    with tm.no_grad():
        out = F.conv2d(x, tm.tensor(np.ones((2, channels, kernel, kernel), dtype)), padding=1)
    expected = max(cols.nbytes for cols in built)
    forbid(conv_ops._blocks)
    answer = exercise("ex06_vision").column_block_bytes(batch, channels, kernel, *out.shape[2:], limit,
                                                        itemsize=np.dtype(dtype).itemsize)
    assert answer == expected


@pytest.mark.parametrize("stride,padding,shape", [(1, 0, (2, 3, 7, 6)), (1, 1, (2, 3, 7, 6)), (2, 1, (2, 3, 7, 6)),
                                                  (3, 2, (1, 2, 9, 11))])
def test_conv2d_im2col_matches_tinymem(exercise, forbid, stride, padding, shape):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal(shape), rng.standard_normal((4, shape[1], 3, 3))
    expected = F.conv2d(tm.tensor(x), tm.tensor(w), stride=stride, padding=padding).numpy()
    forbid(F.conv2d, conv_ops.Conv2d, conv_ops._im2col, conv_ops._blocks)
    ours = exercise("ex06_vision").conv2d_im2col(x, w, stride, padding)
    np.testing.assert_allclose(ours, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("n,micro", [(10, 4), (7, 3)])
def test_microbatch_weights_give_the_full_gradient(exercise, forbid, n, micro):
    rng = np.random.default_rng(0)
    model = models.MLP([4, 8, 3]).to(dtype="float64")
    x, y = tm.tensor(rng.standard_normal((n, 4))), tm.tensor(rng.integers(0, 3, n))
    accumulate_gradients(lambda a, b: F.cross_entropy(model(a), b), (x, y), micro_batch_size=micro)
    full = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    slices = split_batch(n, micro_batch_size=micro)
    forbid(microbatch.accumulate_gradients, microbatch.split_batch)
    weights = exercise("ex06_vision").microbatch_weights([s.stop - s.start for s in slices])
    for s, wgt in zip(slices, weights):
        (F.cross_entropy(model(tm.tensor(x.data[s])), tm.tensor(y.data[s])) * wgt).backward()
    for p, ref in zip(model.parameters(), full):
        np.testing.assert_allclose(p.grad.numpy(), ref, rtol=1e-10)


@pytest.mark.parametrize("answer", [1, 2, 37, 64, 998, 999])
def test_largest_fitting(exercise, forbid, answer):
    calls = []

    def fits(n):
        calls.append(n)
        return n <= answer

    forbid(batch_size.find_max_batch)
    assert exercise("ex06_vision").largest_fitting(fits, 1, 1000) == answer
    assert len(calls) <= 11, f"{len(calls)} calls: bisect"
