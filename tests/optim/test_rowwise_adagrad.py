"""Row-wise Adagrad against a dense NumPy reference; sparse and dense gradients give one result."""
import numpy as np
import pytest
from conftest import to_np

import tinymem as tm
from tinymem import memory, nn, optim


def _reference(w, grads, lr, eps, wd):
    """Textbook row-wise Adagrad over the full table, in float64."""
    w, acc = w.astype(np.float64).copy(), np.zeros(w.shape[0])
    for g in grads:
        g = g + wd * w
        acc += (g * g).mean(axis=1)
        w -= lr * g / (np.sqrt(acc) + eps)[:, None]
    return w, acc


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
@pytest.mark.parametrize("sparse", [False, True])
def test_rowwise_adagrad_matches_dense_reference(sparse, weight_decay):
    rng = np.random.default_rng(0)
    layer = nn.EmbeddingBag(30, 4, mode="mean", sparse=sparse).to(dtype="float64")
    start = to_np(layer.weight).copy()
    opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.1, weight_decay=weight_decay)
    dense_grads = []
    for _ in range(4):
        opt.zero_grad()
        ids = tm.tensor(rng.integers(0, 30, (5, 3)))
        layer(ids).backward(tm.tensor(rng.standard_normal((5, 4))))
        grad = layer.weight.grad.data
        dense_grads.append(to_np(grad.to_dense() if sparse else grad))
        opt.step()
    if weight_decay:
        # Only rows with a gradient step and decay, sparse or dense (as FBGEMM): the reference too.
        w, acc = start.copy(), np.zeros(30)
        for g in dense_grads:
            rows = np.flatnonzero(np.abs(g).sum(1))
            gr = g[rows] + weight_decay * w[rows]
            acc[rows] += (gr * gr).mean(1)
            w[rows] -= 0.1 * gr / (np.sqrt(acc[rows]) + 1e-10)[:, None]
    else:
        w, acc = _reference(start, dense_grads, 0.1, 1e-10, weight_decay)
    np.testing.assert_allclose(to_np(layer.weight), w, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(to_np(opt.state[layer.weight]["sum"]), acc, rtol=1e-12, atol=1e-12)


def test_sparse_and_dense_training_give_identical_weights():
    rng = np.random.default_rng(1)
    tables = [nn.EmbeddingBag(40, 3, mode="sum", sparse=s) for s in (False, True)]
    tables[1].weight.data = tables[0].weight.data.copy()
    opts = [optim.RowWiseAdagrad(t.parameters(), lr=0.05) for t in tables]
    for _ in range(5):
        ids = tm.tensor(rng.integers(0, 40, (4, 6)))
        g = tm.tensor(rng.standard_normal((4, 3)).astype(np.float32))
        for t, o in zip(tables, opts):
            o.zero_grad()
            t(ids).backward(g)
            o.step()
    assert np.array_equal(to_np(tables[0].weight), to_np(tables[1].weight))


def test_state_is_one_float_per_row():
    layer = nn.EmbeddingBag(1000, 16, sparse=True)
    opt = optim.RowWiseAdagrad(layer.parameters())
    before = memory.live_bytes("optimizer")
    layer(tm.tensor(np.array([[1, 2, 3]]))).sum().backward()
    opt.step()
    assert opt.state_bytes() == 4 * 1000 == optim.RowWiseAdagrad.bytes_for((1000, 16), 4, {})
    assert memory.live_bytes("optimizer") - before == 4 * 1000, memory.format_table(memory.LEDGER.by_bucket())


@pytest.mark.parametrize("eps,weight_decay", [(0.0, 0.0), (1e-10, 0.1)])
def test_rows_without_gradient_stay_put_dense_or_sparse(eps, weight_decay):
    """With eps = 0 a dense step used to compute 0 / 0 (NaN) for untouched rows, and with weight
    decay it moved them by the decay over an empty accumulator; sparse steps never touch them."""
    tables = []
    for sparse in (True, False):
        tm.manual_seed(0)
        layer = nn.EmbeddingBag(5, 3, mode="sum", sparse=sparse)
        start = to_np(layer.weight).copy()
        opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.1, eps=eps, weight_decay=weight_decay)
        for _ in range(3):
            opt.zero_grad()
            layer(tm.tensor(np.array([[0, 1], [1, 1]]))).sum().backward()
            opt.step()
        tables.append(to_np(layer.weight))
        np.testing.assert_array_equal(tables[-1][2:], start[2:])
    np.testing.assert_allclose(tables[0], tables[1], rtol=1e-6)



def test_a_coalesced_gradient_given_new_indices_is_coalesced_again():
    """A row-sparse gradient remembers that backward coalesced it, so the step does not coalesce
    it again; new indices (here two ids mapped onto one row) must clear that, else the repeated
    row's squares are added once (acc 1 instead of 4) and its step taken once."""
    layer = nn.EmbeddingBag(6, 2, mode="sum", sparse=True)
    opt = optim.RowWiseAdagrad(layer.parameters(), lr=1.0)
    layer(tm.tensor(np.array([[0, 1]]))).sum().backward()
    grad = layer.weight.grad.data
    grad.indices = np.array([3, 3], np.int64)
    opt.step()
    np.testing.assert_allclose(to_np(opt.state[layer.weight]["sum"]), [0, 0, 0, 4.0, 0, 0])


def test_a_coalesced_gradients_indices_cannot_be_edited_in_place_on_the_host():
    layer = nn.EmbeddingBag(6, 2, mode="sum", sparse=True)
    layer(tm.tensor(np.array([[0, 1]]))).sum().backward()
    with pytest.raises(ValueError, match="read-only"):
        layer.weight.grad.data.indices[...] = 3
