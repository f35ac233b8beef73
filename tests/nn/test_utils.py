"""clip_grad_norm_ against torch.nn.utils.clip_grad_norm_."""
import numpy as np
import pytest
from conftest import TOL, requires_torch

import tinymem as tm
from tinymem.nn.utils import clip_grad_norm_


@requires_torch
@pytest.mark.parametrize("norm_type,max_norm", [(2.0, 0.5), (1.0, 100.0), (float("inf"), 0.5), (3.0, 0.5), (0.5, 1.0),
                                               # -inf is the smallest |g|, 0 counts nonzeros (then norms of norms)
                                               (float("-inf"), 1e-3), (0.0, 0.5)])
def test_matches_torch(norm_type, max_norm):
    import torch
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5,))]
    grads[0][1, 2] = 0.0  # a zero entry: not counted by the 0-"norm", the smallest for -inf
    ours = [tm.tensor(np.zeros_like(g), requires_grad=True) for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for o, t, g in zip(ours, theirs, grads):
        o.grad = tm.tensor(g.copy())
        t.grad = torch.from_numpy(g.copy())
    total = clip_grad_norm_(ours, max_norm, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    np.testing.assert_allclose(total.item(), expected.item(), *TOL["float32"])
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), *TOL["float32"])


def test_float16_gradients_are_normed_in_float32():
    p = tm.tensor(np.zeros(4, np.float16), requires_grad=True)
    p.grad = tm.tensor(np.full(4, 300.0, np.float16))  # 300^2 overflows float16
    total = clip_grad_norm_([p], 1.0)
    assert total.item() == pytest.approx(600.0)
    assert p.grad.dtype == np.float16
    np.testing.assert_allclose(p.grad.numpy().astype(np.float32), 0.5, rtol=1e-3)


def test_nonfinite_norm_can_raise():
    p = tm.tensor(np.zeros(2, np.float32), requires_grad=True)
    p.grad = tm.tensor(np.array([np.inf, 1.0], np.float32))
    with pytest.raises(RuntimeError, match="non-finite"):
        clip_grad_norm_(p, 1.0, error_if_nonfinite=True)


def test_bfloat16_bits_explain():
    p = tm.tensor(np.zeros(2, np.float32), requires_grad=True)
    p._grad = tm.Tensor(np.zeros(2, np.uint16))
    with pytest.raises(TypeError, match="master"):
        clip_grad_norm_(p, 1.0)


def _clip_both(grads, max_norm, norm_type, device="cpu"):
    """Our clipped gradients and PyTorch's, from the same arrays."""
    import torch
    ours = [tm.tensor(np.zeros_like(g), requires_grad=True).to(device) for g in grads]
    theirs = [torch.zeros(g.shape, dtype=getattr(torch, g.dtype.name), requires_grad=True) for g in grads]
    for o, t, g in zip(ours, theirs, grads):
        o.grad = tm.tensor(g.copy()).to(device)
        t.grad = torch.from_numpy(g.copy())
    total = clip_grad_norm_(ours, max_norm, norm_type)
    expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm, norm_type)
    return total, expected, [o.grad.numpy() for o in ours], [t.grad.numpy() for t in theirs]


@requires_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("norm_type", [1.0, 2.0, float("inf")])
def test_clipped_gradients_match_torch_bit_for_bit(device, norm_type, dtype):
    """Where the norm itself is exact (small integers: sums and the max round nowhere), the clip
    factor and the clipped gradients are PyTorch's to the last bit. The factor computed in
    float64 then rounded differed in the last bit for about a third of the max_norms; float64
    gradients were normed and scaled in float32 precision."""
    grads = [np.array([[3.0, -4.0], [0.0, 12.0]], dtype), np.array([-84.0], dtype)]
    for max_norm in np.random.default_rng(0).uniform(0.01, 50.0, 40).tolist():
        total, expected, ours, theirs = _clip_both(grads, max_norm, norm_type, device)
        assert total.item() == expected.item() and total.dtype == expected.numpy().dtype
        for o, t in zip(ours, theirs):
            np.testing.assert_array_equal(o, t, err_msg=f"max_norm {max_norm}")


@requires_torch
def test_float16_gradients_are_scaled_by_the_float32_factor_rounded_once(device):
    """A float16 gradient beside a float32 one: PyTorch's norm is float32, and float16 * float32
    factor is computed in float32 and rounded once. Rounding the factor to float16 first was up to
    an fp16 ulp off (0.8003 for 0.79996)."""
    rng = np.random.default_rng(1)
    grads = [np.array([500.0], np.float32), (rng.standard_normal(64) * 100).astype(np.float16)]
    for max_norm in (0.37, 1.0, 3.3):
        _, _, ours, theirs = _clip_both(grads, max_norm, float("inf"), device)
        assert ours[1].dtype == np.float16
        np.testing.assert_array_equal(ours[1], theirs[1])


@pytest.mark.parametrize("max_norm", [-1.0, float("nan"), None, "1", True])
def test_a_bad_max_norm_is_refused_and_changes_nothing(max_norm):
    """PyTorch takes a negative max_norm (the gradients flip sign: training climbs the loss) or
    NaN (every gradient NaN); here they are refused before any gradient is touched."""
    p = tm.tensor(np.zeros(2, np.float32), requires_grad=True)
    p.grad = tm.tensor(np.array([3.0, 4.0], np.float32))
    with pytest.raises(ValueError, match="max_norm must be a number >= 0"):
        clip_grad_norm_(p, max_norm)
    np.testing.assert_array_equal(p.grad.numpy(), [3.0, 4.0])


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), float("-inf"), 0.0, -1.0])
def test_row_sparse_gradients_clip_as_their_dense_form(device, norm_type):
    """embedding_bag(sparse=True) gives a RowSparse gradient: clipping it raised "expected a NumPy
    or CuPy array ... wrap it first, e.g. tm.tensor(x)". It clips as the dense gradient does (-inf
    and -1: the untouched rows make the norm 0; for -1 the stored rows alone gave 0.13)."""
    results = []
    for sparse in (True, False):
        tm.manual_seed(0)
        layer = tm.nn.EmbeddingBag(8, 3, mode="sum", sparse=sparse).to(device)
        layer(tm.tensor(np.array([[0, 1, 1], [5, 0, 2]])).to(device)).sum().backward()
        total = clip_grad_norm_(layer.parameters(), 0.5, norm_type)
        grad = layer.weight.grad.data
        results.append((total.item(), tm.backend.to_numpy(grad.to_dense() if sparse else grad)))
    (sparse_total, sparse_grad), (dense_total, dense_grad) = results
    assert sparse_total == pytest.approx(dense_total, rel=1e-6)
    np.testing.assert_allclose(sparse_grad, dense_grad, rtol=1e-6)


def _param(values):
    p = tm.tensor(np.zeros(len(values), np.float32), requires_grad=True)
    p.grad = tm.tensor(np.array(values, np.float32))
    return p


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), float("-inf"), -1.0, 0.0, "inf"])
def test_an_empty_gradient_adds_nothing_to_the_norm(norm_type):
    """A parameter of size 0: inf and -inf raised NumPy's "zero-size array to reduction operation
    maximum which has no identity", and -1 gave a norm of inf (so every gradient became 0)."""
    assert clip_grad_norm_([_param([])], 1.0, norm_type).item() == 0.0
    alone, beside = _param([3.0, -4.0]), _param([3.0, -4.0])
    expected = clip_grad_norm_([alone], 1.0, norm_type).item()
    assert clip_grad_norm_([_param([]), beside, _param([])], 1.0, norm_type).item() == expected
    np.testing.assert_array_equal(beside.grad.numpy(), alone.grad.numpy())
    # order 0 counts the tensors with a nonzero norm (a norm of the per-tensor norms, as PyTorch)
    orders = {2.0: 5.0, 1.0: 7.0, -1.0: 12 / 7, 0.0: 1.0, float("inf"): 4.0, float("-inf"): 3.0}
    assert expected == pytest.approx(orders[float(norm_type)], rel=1e-6)


@pytest.mark.parametrize("call, error, message", [
    # 'NoneType' object is not iterable
    (lambda p: clip_grad_norm_(None, 1.0), TypeError, "parameters must be a Tensor or an iterable of Tensors.*got NoneType"),
    # 'int' object has no attribute 'grad'
    (lambda p: clip_grad_norm_([p, 3], 1.0), TypeError, "item 1 is a int"),
    (lambda p: clip_grad_norm_(p, 1.0, norm_type="two"), ValueError, "norm_type must be a number.*got 'two'"),
    (lambda p: clip_grad_norm_(p, 1.0, norm_type=None), TypeError, "norm_type must be a number.*got None"),
    (lambda p: clip_grad_norm_(p, 1.0, norm_type=True), TypeError, "norm_type must be a number.*got True"),
    # accepted: every gradient NaN (PyTorch too)
    (lambda p: clip_grad_norm_(p, 1.0, norm_type=float("nan")), ValueError, "norm_type must be a number.*NaN"),
])
def test_bad_parameters_or_norm_type_are_refused_and_change_nothing(call, error, message):
    p = _param([3.0, -4.0])
    with pytest.raises(error, match=message):
        call(p)
    np.testing.assert_array_equal(p.grad.numpy(), [3.0, -4.0])
    assert clip_grad_norm_(p, 1.0).item() == 5.0


@requires_torch
@pytest.mark.parametrize("foreach", [None, True, False])
def test_foreach_is_taken_as_pytorch_takes_it_and_changes_nothing(foreach):
    """clip_grad_norm_(..., foreach=True), as PyTorch code writes it, raised "got an unexpected
    keyword argument 'foreach'"; it only picks PyTorch's kernels, so here (one code path) it is
    taken, checked (True, False or None) and the result is PyTorch's with the same flag."""
    import torch
    grads = [np.array([3.0, 4.0], np.float32), np.array([[1.0, -2.0]], np.float32)]
    ours = [tm.tensor(np.zeros_like(g), requires_grad=True) for g in grads]
    theirs = [torch.zeros(g.shape, requires_grad=True) for g in grads]
    for o, t, g in zip(ours, theirs, grads):
        o.grad, t.grad = tm.tensor(g.copy()), torch.from_numpy(g.copy())
    total = clip_grad_norm_(ours, 1.0, foreach=foreach)
    assert float(total.numpy()) == float(torch.nn.utils.clip_grad_norm_(theirs, 1.0, foreach=foreach))
    for o, t in zip(ours, theirs):
        np.testing.assert_array_equal(o.grad.numpy(), t.grad.numpy())
    with pytest.raises(TypeError, match="clip_grad_norm_: foreach must be True or False, got 'yes'"):
        clip_grad_norm_(ours, 1.0, foreach="yes")
