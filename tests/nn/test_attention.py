"""Attention ops: plain and chunked against PyTorch and against each other; chunked memory is linear."""
import numpy as np
import pytest
from conftest import TOL, requires_torch, to_np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory

# (query shape, key length, value size, chunk size): ragged chunks, L != S, one chunk only.
CASES = [((2, 3, 17, 8), 17, 8, 5), ((1, 2, 12, 4), 20, 6, 8), ((4, 9, 5), 9, 5, 64)]


def _qkv(qshape, S, Ev, dtype, device, seed=0):
    rng = np.random.default_rng(seed)
    lead, E = qshape[:-2], qshape[-1]
    arrays = (rng.standard_normal(qshape), rng.standard_normal(lead + (S, E)),
              rng.standard_normal(lead + (S, Ev)))
    return [tm.tensor(a.astype(dtype), requires_grad=True, device=device) for a in arrays]


def _run(fn, tensors, seed=1):
    out = fn(*tensors)
    g = np.random.default_rng(seed).standard_normal(out.shape).astype(out.dtype)
    out.backward(tm.tensor(g, device=out.device))
    return [to_np(out)] + [to_np(t.grad) for t in tensors]


@requires_torch
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_attention_matches_torch(case, causal, dtype, device):
    import torch

    qshape, S, Ev, chunk = case
    if causal and S < qshape[-2]:
        pytest.skip("top-left causal masking needs S >= L to keep every row non-empty")
    ours = _qkv(qshape, S, Ev, dtype, device)
    theirs = [torch.tensor(to_np(t), requires_grad=True) for t in ours]
    out = torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=causal)
    out.backward(torch.tensor(np.random.default_rng(1).standard_normal(out.shape).astype(dtype)))
    expected = [out.detach().numpy()] + [t.grad.numpy() for t in theirs]
    rtol, atol = TOL[dtype]
    for fn in (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
               lambda q, k, v: F.chunked_attention(q, k, v, chunk, is_causal=causal)):
        for tensor in ours:
            tensor.grad = None
        for got, want, name in zip(_run(fn, ours), expected, ("out", "dq", "dk", "dv")):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_chunked_equals_plain(causal, dtype, device):
    """Same math, different summation order: equal to 1e-5 in float32, 1e-12 in float64."""
    tol = 1e-5 if dtype == "float32" else 1e-12
    plain = _run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                 _qkv((2, 2, 40, 8), 40, 8, dtype, device))
    chunked = _run(lambda q, k, v: F.chunked_attention(q, k, v, 16, is_causal=causal),
                   _qkv((2, 2, 40, 8), 40, 8, dtype, device))
    for a, b, name in zip(chunked, plain, ("out", "dq", "dk", "dv")):
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol, err_msg=name)


def _saved_activation_bytes(fn, L, E=16, heads=4):
    q, k, v = _qkv((1, heads, L, E), L, E, "float32", "cpu")
    before = memory.live_bytes("activation")
    out = fn(q, k, v)
    saved = memory.live_bytes("activation") - before
    del out
    return saved


def test_chunked_saved_bytes_are_linear_and_match_the_formula():
    plain = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    chunked = lambda q, k, v: F.chunked_attention(q, k, v, 128, is_causal=True)  # noqa: E731
    N, E = 4, 16
    for L in (256, 512, 1024):
        p, c = _saved_activation_bytes(plain, L), _saved_activation_bytes(chunked, L)
        assert p == 4 * N * (3 * L * E + L * L), memory.format_table(memory.LEDGER.by_bucket())
        assert c == 4 * N * (4 * L * E + L), memory.format_table(memory.LEDGER.by_bucket())
    assert c <= 0.1 * p, f"chunked {c:,d} B vs plain {p:,d} B at L=1024"
    assert memory.live_bytes("activation") == 0


def test_attention_rejects_bad_shapes():
    q = tm.randn(2, 5, 4)
    with pytest.raises(ValueError, match="feature size"):
        F.scaled_dot_product_attention(q, tm.randn(2, 5, 3), tm.randn(2, 5, 4))
    with pytest.raises(ValueError, match="same length"):
        F.chunked_attention(q, tm.randn(2, 5, 4), tm.randn(2, 6, 4), 2)
    with pytest.raises(ValueError, match="chunk_size"):
        F.chunked_attention(q, q, q, 0)
