"""MultiheadAttention and EmbeddingBag against PyTorch; sparse and dense table gradients agree."""
import re

import numpy as np
import pytest
from conftest import TOL, requires_torch, to_np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, nn


@requires_torch
@pytest.mark.parametrize("chunk_size", [None, 3])
@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("causal", [False, True])
def test_multihead_self_attention_matches_torch(causal, batch_first, chunk_size, device):
    import torch

    E, H, B, L = 8, 2, 3, 7
    ours = nn.MultiheadAttention(E, H, batch_first=batch_first, chunk_size=chunk_size).to(device)
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=batch_first, dtype=torch.float64)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.tensor(to_np(ours.in_proj_weight)))
        theirs.in_proj_bias.copy_(torch.randn(3 * E))
        theirs.out_proj.weight.copy_(torch.tensor(to_np(ours.out_proj.weight)))
        theirs.out_proj.bias.copy_(torch.randn(E))
    ours.in_proj_bias.data = tm.tensor(theirs.in_proj_bias.detach().numpy().astype(np.float32), device=device).data
    ours.out_proj.bias.data = tm.tensor(theirs.out_proj.bias.detach().numpy().astype(np.float32), device=device).data
    ours.to(dtype="float64")
    shape = (B, L, E) if batch_first else (L, B, E)
    x = np.random.default_rng(0).standard_normal(shape)
    g = np.random.default_rng(1).standard_normal(shape)
    xt = torch.tensor(x, requires_grad=True)
    mask = torch.triu(torch.ones(L, L, dtype=torch.bool), 1) if causal else None
    out_t, _ = theirs(xt, xt, xt, need_weights=False, attn_mask=mask, is_causal=causal)
    out_t.backward(torch.tensor(g))
    xs = tm.tensor(x, requires_grad=True, device=device)
    out, weights = ours(xs, is_causal=causal)
    out.backward(tm.tensor(g, device=device))
    assert weights is None
    rtol, atol = TOL["float64"]
    np.testing.assert_allclose(to_np(out), out_t.detach().numpy(), rtol=rtol, atol=atol)
    np.testing.assert_allclose(to_np(xs.grad), xt.grad.numpy(), rtol=rtol, atol=atol)
    for name in ("in_proj_weight", "in_proj_bias"):
        np.testing.assert_allclose(to_np(getattr(ours, name).grad), getattr(theirs, name).grad.numpy(),
                                   rtol=rtol, atol=atol, err_msg=name)
    np.testing.assert_allclose(to_np(ours.out_proj.weight.grad), theirs.out_proj.weight.grad.numpy(),
                               rtol=rtol, atol=atol)


@requires_torch
def test_multihead_cross_attention_matches_torch():
    import torch

    E, H = 6, 3
    ours = nn.MultiheadAttention(E, H, batch_first=True)
    theirs = torch.nn.MultiheadAttention(E, H, batch_first=True)
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.tensor(to_np(ours.in_proj_weight)))
        theirs.out_proj.weight.copy_(torch.tensor(to_np(ours.out_proj.weight)))
    rng = np.random.default_rng(0)
    q, kv = rng.standard_normal((2, 4, E)).astype(np.float32), rng.standard_normal((2, 9, E)).astype(np.float32)
    out, _ = ours(tm.tensor(q), tm.tensor(kv), tm.tensor(kv))
    expected, _ = theirs(torch.tensor(q), torch.tensor(kv), torch.tensor(kv), need_weights=False)
    np.testing.assert_allclose(to_np(out), expected.detach().numpy(), *TOL["float32"])


def _bag_inputs(layout, rng):
    if layout == "2d":
        return rng.integers(0, 11, (5, 4)), None
    return rng.integers(0, 11, 9), np.array([0, 2, 2, 7])  # the second bag is empty


@requires_torch
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("layout", ["2d", "offsets"])
def test_embedding_bag_matches_torch(layout, mode, sparse, device):
    import torch

    rng = np.random.default_rng(0)
    ids, offsets = _bag_inputs(layout, rng)
    table = rng.standard_normal((11, 3))
    weight = tm.tensor(table, requires_grad=True, device=device)
    idx = tm.tensor(ids, device=device)
    offs = None if offsets is None else tm.tensor(offsets, device=device)
    out = F.embedding_bag(idx, weight, offs, mode=mode, sparse=sparse)
    g = rng.standard_normal(out.shape)
    out.backward(tm.tensor(g, device=device))
    wt = torch.tensor(table, requires_grad=True)
    ot = torch.nn.functional.embedding_bag(torch.tensor(ids), wt, None if offsets is None else torch.tensor(offsets),
                                           mode=mode, sparse=sparse)
    ot.backward(torch.tensor(g))
    np.testing.assert_allclose(to_np(out), ot.detach().numpy(), *TOL["float64"])
    grad = weight.grad.data
    if sparse:
        assert grad.is_sparse and len(grad.indices) == len(np.unique(ids))
        assert np.array_equal(to_np(grad.indices), np.unique(ids))
        grad = grad.to_dense()
    np.testing.assert_allclose(to_np(grad), wt.grad.to_dense().numpy(), *TOL["float64"])


def test_sparse_and_dense_gradients_equal_after_densifying():
    rng = np.random.default_rng(0)
    dense, sparse = (nn.EmbeddingBag(50, 4, mode="sum", sparse=s) for s in (False, True))
    sparse.weight.data = dense.weight.data.copy()
    for _ in range(2):  # two backward passes accumulate
        ids = tm.tensor(rng.integers(0, 50, (6, 5)))
        g = rng.standard_normal((6, 4)).astype(np.float32)
        for layer in (dense, sparse):
            layer(ids).backward(tm.tensor(g))
    assert np.array_equal(to_np(sparse.weight.grad.data.to_dense()), to_np(dense.weight.grad))


@requires_torch
@pytest.mark.parametrize("order", ["one_backward", "dense_first", "sparse_first"])
def test_a_sparse_and_a_dense_gradient_of_one_table_add_up_dense_as_in_torch(order):
    """A table looked up sparsely and also used densely (tied weights, a penalty): the sum is
    dense, in whichever order the two gradients arrive."""
    import torch
    w0 = np.random.default_rng(0).standard_normal((6, 3))
    ids, offsets = np.array([1, 1, 2, 5]), np.array([0, 2])

    def losses(w, bag, mul):
        return (lambda: bag(w).sum()), (lambda: mul(w).sum())

    w = tm.tensor(w0, requires_grad=True)
    sparse, dense = losses(w, lambda t: F.embedding_bag(ids, t, offsets, mode="sum", sparse=True), lambda t: t * t)
    wt = torch.tensor(w0, requires_grad=True)
    tsparse, tdense = losses(wt, lambda t: torch.nn.functional.embedding_bag(
        torch.from_numpy(ids), t, torch.from_numpy(offsets), mode="sum", sparse=True), lambda t: t * t)
    for first, second in ([(sparse, dense), (tsparse, tdense)] if order != "dense_first"
                          else [(dense, sparse), (tdense, tsparse)]):
        if order == "one_backward":
            (first() + second()).backward()
        else:
            first().backward()
            second().backward()
    grad = wt.grad.to_dense() if wt.grad.is_sparse else wt.grad
    assert not getattr(w.grad.data, "is_sparse", False)
    np.testing.assert_allclose(w.grad.numpy(), grad.numpy(), *TOL["float64"])


def test_sparse_gradient_bytes_are_the_touched_rows():
    table = nn.EmbeddingBag(100_000, 8, mode="sum", sparse=True)
    ids = tm.tensor(np.array([[3, 5, 3], [7, 99_999, 5]]))
    table(ids).sum().backward()
    grad = table.weight.grad.data
    assert grad.nbytes == 4 * (8 + 4 * 8)  # 4 distinct rows: int64 id + 8 float32 values
    assert memory.live_bytes("gradient") == grad.nbytes, memory.format_table(memory.LEDGER.by_bucket())


def test_dense_optimizers_refuse_sparse_gradients():
    table = nn.EmbeddingBag(10, 2, sparse=True)
    table(tm.tensor(np.array([[1, 2]]))).sum().backward()
    with pytest.raises(TypeError, match="sparse gradients"):
        tm.optim.Adam(table.parameters()).step()


def test_embedding_bag_rejects_bad_input():
    w = tm.randn(5, 2, requires_grad=True)
    with pytest.raises(IndexError, match=r"\[0, 5\)"):
        F.embedding_bag(tm.tensor(np.array([[0, 5]])), w)
    with pytest.raises(ValueError, match="offsets"):
        F.embedding_bag(tm.tensor(np.array([0, 1, 2])), w)
    with pytest.raises(ValueError, match="mode"):
        F.embedding_bag(tm.tensor(np.array([[0, 1]])), w, mode="max")


def test_embedding_bag_takes_offsets_as_a_list():
    """A list of offsets raised AttributeError: 'list' object has no attribute 'dtype' (a list of
    ids worked): both are made host arrays at the door, as F.embedding takes a list."""
    w = tm.tensor(np.arange(15.0).reshape(5, 3))
    expected = F.embedding_bag(tm.tensor(np.array([0, 1, 4])), w, tm.tensor(np.array([0, 1])), mode="sum")
    np.testing.assert_array_equal(F.embedding_bag([0, 1, 4], w, [0, 1], mode="sum").numpy(), expected.numpy())
    np.testing.assert_array_equal(expected.numpy(), [[0, 1, 2], [15, 17, 19]])
    with pytest.raises(TypeError, match="offsets must be integers, got float64"):
        F.embedding_bag([0, 1, 4], w, [0, 1.5])
    with pytest.raises(TypeError, match="embedding_bag: offsets must be an integer Tensor, array or list, got int"):
        F.embedding_bag([0, 1, 4], w, 1)


@pytest.mark.parametrize("sparse", ["no", 1, None, np.array([True])])
def test_embedding_bag_takes_sparse_as_true_or_false_only(sparse):
    """sparse="no" (or 1) was taken by its truth: a RowSparse gradient that a dense optimizer
    then refuses, and None a dense one; PyTorch refuses a non-bool. The module refuses it at
    construction, and a good call after a refused one works."""
    w = tm.tensor(np.ones((5, 3)), requires_grad=True)
    with pytest.raises(TypeError, match=re.escape(f"embedding_bag: sparse must be True or False, got {sparse!r}")):
        F.embedding_bag([0, 1, 4], w, [0, 1], sparse=sparse)
    with pytest.raises(TypeError, match=re.escape(f"EmbeddingBag: sparse must be True or False, got {sparse!r}")):
        nn.EmbeddingBag(5, 3, sparse=sparse)
    F.embedding_bag([0, 1, 4], w, [0, 1], mode="sum", sparse=np.bool_(False)).sum().backward()
    np.testing.assert_array_equal(w.grad.data[:, 0], [1, 1, 0, 0, 1])


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("offsets", [[], np.zeros(0, np.int64)], ids=["list", "array"])
def test_embedding_bag_with_no_bags_is_empty(offsets, sparse, device):
    """Empty offsets: no bags, so a (0, D) result whatever the ids, as PyTorch returns (an id out
    of range included); it raised IndexError from the scatter (index 0 is out of bounds)."""
    w = tm.tensor(np.ones((5, 3)), requires_grad=True, device=device)
    out = F.embedding_bag(tm.tensor(np.array([0, 1, 9]), device=device), w, offsets, sparse=sparse)
    assert out.shape == (0, 3) and out.device == w.device
    out.sum().backward()
    grad = w.grad.data
    assert not np.any(to_np(grad.to_dense() if sparse else grad))


def test_int32_ids_give_int64_rows_and_a_sparse_gradient_can_be_zeroed_in_place():
    table = nn.EmbeddingBag(10, 3, sparse=True)
    table(tm.tensor(np.array([[1, 2]], np.int32))).sum().backward()
    grad = table.weight.grad.data
    assert grad.indices.dtype == np.int64 and grad.nbytes == 2 * (8 + 3 * 4)  # as RowSparse documents
    table.zero_grad(set_to_none=False)  # raised TypeError on a row-sparse gradient
    assert table.weight.grad.data is grad and not np.any(to_np(grad.values))
    from tinymem import optim
    opt = optim.RowWiseAdagrad(table.parameters())
    table(tm.tensor(np.array([[3]]))).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert not np.any(to_np(table.weight.grad.data.values))
