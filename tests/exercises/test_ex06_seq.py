"""Checks for lesson 6 (language and recommenders) exercises."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import backend, memory, nn, optim
from tinymem.sparse import RowSparse

pytestmark = pytest.mark.exercise_06


@pytest.mark.parametrize("split", [7, 2])
def test_merge_partials_gives_full_attention(exercise, split):
    mod = exercise("ex06_seq")
    rng = np.random.default_rng(split)
    s, v = rng.standard_normal((5, 12)) * 4, rng.standard_normal((12, 3))
    s[0, :split] += 30  # row 0's maximum lies in the first part, row 1's far into the second:
    s[1, split:] += 1000  # exp(1000) overflows, so the merge must rescale to the larger maximum

    def partial(cols):
        m = s[:, cols].max(axis=1)
        p = np.exp(s[:, cols] - m[:, None])
        return m, p.sum(axis=1), p @ v[cols]

    m, l, acc = mod.merge_partials(partial(slice(0, split)), partial(slice(split, 12)))
    p = np.exp(s - s.max(axis=1, keepdims=True))
    np.testing.assert_allclose(acc / l[:, None], (p / p.sum(1, keepdims=True)) @ v, rtol=1e-12)
    top = s.max(axis=1)
    np.testing.assert_allclose(m + np.log(l), top + np.log(np.exp(s - top[:, None]).sum(1)), rtol=1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("chunked", [False, True])
def test_attention_saved_bytes_match_the_ledger(exercise, chunked, dtype):
    mod = exercise("ex06_seq")
    B, H, L, E = 2, 3, 96, 8
    rng = np.random.default_rng(0)
    q, k, v = (tm.tensor(rng.standard_normal((B, H, L, E)).astype(dtype), requires_grad=True) for _ in range(3))
    before = memory.live_bytes("activation")
    out = (F.chunked_attention(q, k, v, 32, is_causal=True) if chunked
           else F.scaled_dot_product_attention(q, k, v, is_causal=True))
    saved = mod.attention_saved_bytes(B, H, L, E, chunked, itemsize=np.dtype(dtype).itemsize)
    assert saved == memory.live_bytes("activation") - before
    del out


def test_coalesce_rows_matches_row_sparse(exercise, forbid):
    rng = np.random.default_rng(0)
    indices, values = rng.integers(0, 20, 30), rng.standard_normal((30, 4))
    expected = RowSparse(indices.copy(), values.copy(), (20, 4)).coalesce()
    forbid((RowSparse, "coalesce"), (RowSparse, "to_dense"))
    rows, summed = exercise("ex06_seq").coalesce_rows(indices, values)
    np.testing.assert_array_equal(rows, expected.indices)
    np.testing.assert_allclose(summed, expected.values, rtol=1e-12)


def test_rowwise_adagrad_rows_matches_the_optimizer(exercise, forbid):
    rng = np.random.default_rng(0)
    layer = nn.EmbeddingBag(25, 3, mode="sum", sparse=True).to(dtype="float64")
    weight, acc = layer.weight.numpy().copy(), np.zeros(25)
    opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.3)
    steps = []
    for _ in range(3):
        opt.zero_grad()
        layer(tm.tensor(rng.integers(0, 25, (4, 5)))).backward(tm.tensor(rng.standard_normal((4, 3))))
        grad = layer.weight.grad.data
        steps.append((backend.to_numpy(grad.indices).copy(), backend.to_numpy(grad.values).copy()))  # NumPy answers
        opt.step()
    forbid((optim.RowWiseAdagrad, "step"), (optim.RowWiseAdagrad, "update_parameter"))
    mod = exercise("ex06_seq")
    for indices, values in steps:
        mod.rowwise_adagrad_rows(weight, acc, indices, values, 0.3)
    np.testing.assert_allclose(weight, layer.weight.numpy(), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(acc, backend.to_numpy(opt.state[layer.weight]["sum"]), rtol=1e-12)
