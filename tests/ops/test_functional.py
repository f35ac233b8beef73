"""The op table drives the gradient tests (minitorch's MathTest, tinygrad's helper_test_op).

Each row: an op written for tinymem, the same op written for PyTorch, and its input shapes and
domain. Every row is checked against float64 central differences and against PyTorch autograd
(values and gradients). A new op is one new row.
"""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from conftest import requires_torch
from gradcheck import numeric_grads, tinymem_grads, torch_grads

# As tuples, made arrays at each use: an array handed to an op is registered in the ledger while
# it lives, and a module-level one would live (and be counted) for the rest of the test session.
TARGETS = (2, 0, 1, 2)
EMB_IDX = ((0, 2, 2), (4, 1, 0))


def _tF():
    import torch.nn.functional as tF
    return tF


# name: (tinymem fn, torch fn, shapes, domain) ; domain "pos" = inputs in (0.5, 2)
OPS = {
    "add_broadcast": (lambda a, b: a + b, lambda a, b: a + b, [(2, 1, 4), (3, 1)], None),
    "sub_broadcast": (lambda a, b: a - b, lambda a, b: a - b, [(3, 4), (4,)], None),
    "mul_broadcast": (lambda a, b: a * b, lambda a, b: a * b, [(2, 3, 4), (3, 1)], None),
    "div": (lambda a, b: a / b, lambda a, b: a / b, [(3, 4), (3, 4)], "pos"),
    "neg": (lambda a: -a, lambda a: -a, [(3, 4)], None),
    "scalar_ops": (lambda a: (2.0 - a) * 3.0 / 1.5 + 1.0, lambda a: (2.0 - a) * 3.0 / 1.5 + 1.0, [(3, 2)], None),
    "rdiv": (lambda a: 1.0 / a, lambda a: 1.0 / a, [(4,)], "pos"),
    "pow_scalar": (lambda a: a ** 2.5, lambda a: a ** 2.5, [(3, 4)], "pos"),
    "pow_tensor": (lambda a, b: a ** b, lambda a, b: a ** b, [(3, 4), (4,)], "pos"),
    "matmul_2d": (lambda a, b: a @ b, lambda a, b: a @ b, [(3, 4), (4, 5)], None),
    "matmul_batched": (lambda a, b: a @ b, lambda a, b: a @ b, [(2, 3, 4), (4, 5)], None),
    "matmul_broadcast": (lambda a, b: a @ b, lambda a, b: a @ b, [(2, 1, 3, 4), (5, 4, 2)], None),
    "matmul_vec_mat": (lambda a, b: a @ b, lambda a, b: a @ b, [(4,), (4, 5)], None),
    "matmul_mat_vec": (lambda a, b: a @ b, lambda a, b: a @ b, [(2, 3, 4), (4,)], None),
    "matmul_vec_vec": (lambda a, b: a @ b, lambda a, b: a @ b, [(4,), (4,)], None),
    "exp": (F.exp, lambda a: a.exp(), [(3, 4)], None),
    "log": (F.log, lambda a: a.log(), [(3, 4)], "pos"),
    "sqrt": (F.sqrt, lambda a: a.sqrt(), [(3, 4)], "pos"),
    "tanh": (F.tanh, lambda a: a.tanh(), [(3, 4)], None),
    "sigmoid": (F.sigmoid, lambda a: a.sigmoid(), [(3, 4)], None),
    "relu": (F.relu, lambda a: a.relu(), [(3, 4)], "away0"),
    "gelu": (F.gelu, lambda a: _tF().gelu(a, approximate="tanh"), [(3, 4)], None),
    "abs": (F.abs, lambda a: a.abs(), [(3, 4)], "away0"),
    "clamp": (lambda a: F.clamp(a, -0.5, 0.7), lambda a: a.clamp(-0.5, 0.7), [(4, 5)], "away_edges"),
    "sum_all": (lambda a: a.sum(), lambda a: a.sum(), [(3, 4)], None),
    "sum_axis_keepdims": (lambda a: a.sum(axis=1, keepdims=True), lambda a: a.sum(1, keepdim=True), [(2, 3, 4)], None),
    "mean_axes": (lambda a: a.mean(axis=(0, 2)), lambda a: a.mean((0, 2)), [(2, 3, 4)], None),
    "max_axis": (lambda a: a.max(axis=1), lambda a: a.amax(1), [(3, 5)], None),
    "max_all": (lambda a: a.max(), lambda a: a.amax(), [(3, 5)], None),
    "reshape": (lambda a: a.reshape(4, 3) * 1.5, lambda a: a.reshape(4, 3) * 1.5, [(3, 4)], None),
    "transpose": (lambda a: a.transpose(0, 2) * 2.0, lambda a: a.transpose(0, 2) * 2.0, [(2, 3, 4)], None),
    "permute": (lambda a: a.permute(2, 0, 1) * 2.0, lambda a: a.permute(2, 0, 1) * 2.0, [(2, 3, 4)], None),
    "getitem_slice": (lambda a: a[1:, ::2] * 2.0, lambda a: a[1:, ::2] * 2.0, [(3, 5)], None),
    "getitem_advanced_repeats": (lambda a: a[np.array([0, 2, 0])] * 2.0,
                                 lambda a: a[[0, 2, 0]] * 2.0, [(3, 4)], None),
    "getitem_mixed": (lambda a: a[:, np.array([1, 1, 3])] * 2.0, lambda a: a[:, [1, 1, 3]] * 2.0, [(3, 4)], None),
    "concatenate": (lambda a, b: F.concatenate([a, b], axis=1), lambda a, b: __import__("torch").cat([a, b], 1),
                    [(2, 3), (2, 2)], None),
    "stack": (lambda a, b: F.stack([a, b], axis=1), lambda a, b: __import__("torch").stack([a, b], 1),
              [(2, 3), (2, 3)], None),
    "where": (lambda a, b: F.where(np.array([[True, False, True]]), a, b),
              lambda a, b: __import__("torch").where(__import__("torch").tensor([[True, False, True]]), a, b),
              [(2, 3), (2, 3)], None),
    "softmax_last": (F.softmax, lambda a: a.softmax(-1), [(3, 5)], None),
    "softmax_axis0": (lambda a: F.softmax(a, axis=0), lambda a: a.softmax(0), [(3, 5)], None),
    "log_softmax": (F.log_softmax, lambda a: a.log_softmax(-1), [(3, 5)], None),
    "cross_entropy": (lambda a: F.cross_entropy(a, np.array(TARGETS)), lambda a: _tF().cross_entropy(
        a, __import__("torch").tensor(TARGETS)), [(4, 3)], None),
    "cross_entropy_sum": (lambda a: F.cross_entropy(a, np.array(TARGETS), reduction="sum"), lambda a: _tF().cross_entropy(
        a, __import__("torch").tensor(TARGETS), reduction="sum"), [(4, 3)], None),
    "mse_loss": (F.mse_loss, lambda a, b: _tF().mse_loss(a, b), [(3, 4), (3, 4)], None),
    "huber_loss": (F.huber_loss, lambda a, b: _tF().huber_loss(a, b), [(3, 4), (3, 4)], "away_kink"),
    "huber_loss_delta_sum": (lambda a, b: F.huber_loss(a, b, "sum", delta=0.5),
                             lambda a, b: _tF().huber_loss(a, b, "sum", delta=0.5), [(3, 4), (3, 4)], "away_kink"),
    "smooth_l1_loss": (lambda a, b: F.smooth_l1_loss(a, b, beta=2.0),
                       lambda a, b: _tF().smooth_l1_loss(a, b, beta=2.0), [(3, 4), (3, 4)], "away_kink"),
    "linear": (F.linear, lambda x, w, b: _tF().linear(x, w, b), [(2, 3, 4), (5, 4), (5,)], None),
    "layer_norm": (lambda x, w, b: F.layer_norm(x, 4, w, b), lambda x, w, b: _tF().layer_norm(x, (4,), w, b),
                   [(3, 4), (4,), (4,)], None),
    "embedding": (lambda w: F.embedding(np.array(EMB_IDX), w), lambda w: _tF().embedding(__import__("torch").tensor(EMB_IDX), w),
                  [(5, 3)], None),
}


def _inputs(shapes, domain, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        if domain == "pos":
            a = rng.uniform(0.5, 2.0, shape)
        else:
            a = rng.standard_normal(shape)
            if domain == "away0":
                a = np.where(np.abs(a) < 0.1, 0.3, a)
            if domain == "away_kink":  # differences of two such inputs avoid |d| = 0.5, 1 and 2
                a = np.round(a * 4) / 4 + (0.1 if len(out) == 0 else 0.0)
            if domain == "away_edges":
                a = np.where((np.abs(a + 0.5) < 0.05) | (np.abs(a - 0.7) < 0.05), 0.1, a)
        out.append(a)
    return out


def _numpy_fn(fn):
    def run(*arrays):
        with tm.no_grad():
            return fn(*[tm.tensor(a) for a in arrays]).numpy()
    return run


@pytest.mark.parametrize("name", sorted(OPS))
def test_gradient_matches_finite_differences(name):
    fn, _, shapes, domain = OPS[name]
    arrays = _inputs(shapes, domain)
    w, expected = numeric_grads(_numpy_fn(fn), arrays)
    _, got = tinymem_grads(fn, arrays, w)
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7, err_msg=f"{name}: input {i}")


@requires_torch
@pytest.mark.parametrize("name", sorted(OPS))
def test_value_and_gradient_match_pytorch(name):
    fn, torch_fn, shapes, domain = OPS[name]
    arrays = _inputs(shapes, domain, seed=1)
    w = np.random.default_rng(7).standard_normal(np.shape(_numpy_fn(fn)(*arrays)))
    out, got = tinymem_grads(fn, arrays, w)
    ref_out, expected = torch_grads(torch_fn, arrays, w)
    np.testing.assert_allclose(out.numpy(), ref_out, rtol=1e-10, atol=1e-12, err_msg=f"{name}: value")
    for i, (g, e) in enumerate(zip(got, expected)):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-11, err_msg=f"{name}: grad of input {i}")


@requires_torch
@pytest.mark.parametrize("name", ["matmul_broadcast", "layer_norm", "cross_entropy", "gelu", "softmax_last"])
def test_float32_matches_pytorch_float32(name):
    import torch

    fn, torch_fn, shapes, domain = OPS[name]
    arrays = [a.astype(np.float32) for a in _inputs(shapes, domain, seed=2)]
    ours = [tm.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = fn(*ours), torch_fn(*theirs)
    assert out.dtype == np.float32
    out.sum().backward()
    ref.sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o.grad.numpy(), t.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_dropout_gradient_is_the_mask_it_drew():
    x = tm.tensor(np.ones((50, 40)), requires_grad=True)
    tm.manual_seed(3)
    y = F.dropout(x, p=0.3)
    y.sum().backward()
    kept = y.numpy() != 0
    np.testing.assert_allclose(x.grad.numpy(), kept / 0.7)
    assert 0.6 < kept.mean() < 0.8
    tm.manual_seed(3)
    np.testing.assert_array_equal(F.dropout(x, p=0.3).numpy(), y.numpy())  # the seed replays the mask


def test_dropout_is_identity_in_eval_and_p0():
    x = tm.tensor(np.ones((3, 3)))
    assert F.dropout(x, 0.5, training=False) is x
    assert F.dropout(x, 0.0) is x
    with pytest.raises(ValueError, match="dropout probability"):
        F.dropout(x, 1.0)


def test_float32_stays_float32_through_ops_with_python_scalars():
    x = tm.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    y = F.gelu(x * 2.0 + 1.0) / 3.0
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad.dtype == np.float32


@requires_torch
@pytest.mark.parametrize("base,exponent,grads", [
    # a constant array exponent (no gradient of its own): backward still needs its values
    ([1.5, 2.0, 0.7], [2.0, 3.0, -0.5], "a"),
    # base 0: d/da at exponent 0 and d/db at exponent >= 0 are the limits (0), not 0 * inf
    ([0.0, 2.0, 0.0, 3.0], [0.0, 0.0, 2.0, 1.5], "ab"),
    ([0.0, 3.0, 0.0], [2.0, 2.0, 0.5], "b"),
    ([0.0, 2.0], 0.0, "a"),
])
def test_pow_gradients_equal_pytorch_at_zero_and_with_constant_exponents(base, exponent, grads):
    import torch
    a_np, b_np = np.array(base), np.array(exponent)
    a = tm.tensor(a_np, requires_grad="a" in grads)
    ta = torch.tensor(a_np, requires_grad="a" in grads)
    if isinstance(exponent, float):
        b, tb = exponent, exponent
    else:
        b, tb = tm.tensor(b_np, requires_grad="b" in grads), torch.tensor(b_np, requires_grad="b" in grads)
    (a ** b).sum().backward()
    (ta ** tb).sum().backward()
    if "a" in grads:
        np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    if "b" in grads:
        np.testing.assert_allclose(b.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


def test_shape_mismatch_names_op_and_shapes():
    a, b = tm.tensor(np.ones((3, 4))), tm.tensor(np.ones((5,)))
    with pytest.raises(ValueError, match=r"add: shapes \(3, 4\) and \(5,\)"):
        a + b
    with pytest.raises(ValueError, match=r"matmul: shapes \(3, 4\) and \(5,\)"):
        a @ b
    with pytest.raises(ValueError, match="linear"):
        F.linear(a, tm.tensor(np.ones((2, 3))))
    with pytest.raises(ValueError, match="cross_entropy"):
        F.cross_entropy(a, np.array([0, 1]))


def test_cross_entropy_is_stable_for_huge_logits():
    logits = tm.tensor(np.array([[1000.0, 0.0], [-1000.0, 1000.0]]), requires_grad=True)
    loss = F.cross_entropy(logits, np.array([0, 1]))
    assert np.isfinite(loss.item()) and abs(loss.item()) < 1e-6
    loss.backward()
    assert np.all(np.isfinite(logits.grad.numpy()))



@pytest.mark.parametrize("dtype,ties", [(np.float16, 3001), (np.float16, 70_000), (np.float32, 70_000)])
@pytest.mark.parametrize("axis", [None, 1])
def test_max_shares_its_gradient_among_many_ties_in_every_dtype(dtype, ties, axis):
    """Each of n tied maxima gets 1/n of the gradient, rounded once to the input's dtype. The
    count must not be kept in a float16 gradient's dtype: 3001 is not a float16 and past 65504
    it is inf, which made every share 0. (PyTorch 2.13's CPU amax backward along an axis has
    that overflow too, so the reference is the float64 quotient.)"""
    x = tm.tensor(np.zeros((2, ties), dtype), requires_grad=True)
    F.max(x, axis=axis).sum().backward()
    share = 1 / (ties if axis else 2 * ties)
    assert x.grad.dtype == dtype
    np.testing.assert_array_equal(x.grad.numpy(), np.full((2, ties), share).astype(dtype))


@requires_torch
@pytest.mark.parametrize("shape,axis", [((0,), -1), ((3, 0), -1), ((0, 4), 1), ((2, 0, 3), 1)])
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_an_empty_axis_is_empty_as_in_pytorch(op, shape, axis, device):
    """A max over nothing raised NumPy's raw 'zero-size array to reduction operation maximum'."""
    import torch
    x = tm.tensor(np.ones(shape, np.float32), requires_grad=True, device=device)
    y = getattr(F, op)(x, axis=axis)
    ref = getattr(torch, op)(torch.ones(shape), axis)
    assert y.shape == tuple(ref.shape) and y.dtype == np.float32 and y.device == device
    y.sum().backward()
    assert x.grad.shape == shape


@requires_torch
@pytest.mark.parametrize("op", ["sigmoid", "avg_pool2d", "huber_loss"])
def test_integer_inputs_give_the_float_values(op, device):
    """sigmoid cast its floats back to the integers' dtype (0 and 1), and avg_pool2d and
    huber_loss, which divide or halve in place, raised NumPy's raw 'Cannot cast ufunc ...
    output from float64 to int64': each gives the values PyTorch gives for the same numbers
    as floats."""
    import torch
    import torch.nn.functional as TF
    values = np.arange(-16, 16).reshape(2, 1, 4, 4)
    ours = {"sigmoid": F.sigmoid, "avg_pool2d": lambda x: F.avg_pool2d(x, 2),
            "huber_loss": lambda x: F.huber_loss(x, x * 0, reduction="none", delta=1.5)}[op]
    theirs = {"sigmoid": torch.sigmoid, "avg_pool2d": lambda x: TF.avg_pool2d(x, 2),
              "huber_loss": lambda x: TF.huber_loss(x, x * 0, reduction="none", delta=1.5)}[op]
    out = ours(tm.tensor(values, device=device))
    assert out.dtype.kind == "f" and out.device == device
    np.testing.assert_allclose(out.numpy(), theirs(torch.tensor(values, dtype=torch.float64)).numpy(), rtol=1e-12)


@requires_torch
@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.uint8, np.float16])
def test_max_pool2d_with_padding_takes_integer_images(dtype, device):
    """The padding was -inf, which an integer array cannot hold (a raw OverflowError)."""
    import torch
    values = (np.arange(2 * 3 * 5 * 5) % 97).reshape(2, 3, 5, 5).astype(dtype)
    out = F.max_pool2d(tm.tensor(values, device=device), 3, stride=2, padding=1)
    ref = torch.nn.functional.max_pool2d(torch.tensor(values.astype(np.float64)), 3, stride=2, padding=1)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out.numpy(), ref.numpy().astype(dtype))
