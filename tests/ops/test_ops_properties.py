"""Property tests (Hypothesis) of the elementwise and reduction ops.

Forward: random shapes that broadcast, float32 and float64, values including 0, -0, subnormals,
+-inf, NaN and empty arrays, against NumPy in float64 (float32 results within a few units in
the last place of the rounded reference; NaN and inf where the reference has them). Backward:
float64 central differences on random finite values in each op's domain.
"""
import warnings

import numpy as np
import pytest
from gradcheck import numeric_grads, tinymem_grads
from hypothesis import example, given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinymem as tm
import tinymem.functional as F
from tinymem import backend


def _sigmoid(a):
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-a))


def _gelu(a):
    return 0.5 * a * (1 + np.tanh(np.sqrt(2 / np.pi) * (a + 0.044715 * a ** 3)))


# name: (tinymem op, float64 NumPy reference, gradient domain)
UNARY = {
    "neg": (lambda a: -a, np.negative, None),
    "exp": (F.exp, np.exp, None),
    "log": (F.log, np.log, "pos"),
    "sqrt": (F.sqrt, np.sqrt, "pos"),
    "tanh": (F.tanh, np.tanh, None),
    "sigmoid": (F.sigmoid, _sigmoid, None),
    "relu": (F.relu, lambda a: np.maximum(a, 0), "nonzero"),
    "abs": (F.abs, np.abs, "nonzero"),
    "gelu": (F.gelu, _gelu, None),
}
BINARY = {
    "add": (lambda a, b: a + b, np.add, None),
    "sub": (lambda a, b: a - b, np.subtract, None),
    "mul": (lambda a, b: a * b, np.multiply, None),
    "div": (lambda a, b: a / b, np.divide, "pos"),
    "pow": (lambda a, b: a ** b, np.power, "pos"),
}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]


def _values(dtype):
    info = np.finfo(dtype)
    tiny = [float(info.smallest_subnormal), -float(info.smallest_subnormal), float(info.tiny) / 3]
    return st.one_of(st.floats(width=8 * np.dtype(dtype).itemsize), st.sampled_from(SPECIAL + tiny))


def _arrays(dtype, shape):
    return hnp.arrays(dtype, shape, elements=_values(dtype))


def _close(ours, reference, dtype, what):
    """float64: as the reference to 1e-12; float32: within 4 ulp of the rounded reference
    (8 absolute units of the smallest normal near 0), where the reference is in range."""
    ours = np.asarray(ours, dtype=np.float64)
    assert ours.shape == reference.shape, what
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(reference), err_msg=what)
    if dtype == np.float64:
        np.testing.assert_allclose(ours, reference, rtol=1e-12, atol=0, err_msg=what)
        return
    info = np.finfo(np.float32)
    in_range = np.abs(reference) < info.max / 2
    with np.errstate(over="ignore"):
        ref32 = reference.astype(np.float32).astype(np.float64)
    np.testing.assert_allclose(ours[in_range], ref32[in_range], rtol=4 * info.eps, atol=8 * info.tiny,
                               err_msg=what)


def _forward(op, *arrays):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # inf - inf, log(-1): NaN is the answer
        return op(*[tm.tensor(a) for a in arrays]).numpy()


def _flushed(a):
    """``a`` as a GPU's float32 kernels read it: subnormals are ±0 (flush to zero, as CuPy's
    kernels do; NumPy on the CPU keeps them), so 0 / 1e-45 is NaN there, as 0 / 0."""
    if a.dtype != np.float32 or backend.default_device() == "cpu":
        return a
    return np.where(np.abs(a) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), a), a)


def _reference(ref, *arrays):
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of nothing is NaN
        return np.asarray(ref(*[_flushed(a).astype(np.float64) for a in arrays]), dtype=np.float64)


@given(name=st.sampled_from(sorted(UNARY)), dtype=st.sampled_from([np.float32, np.float64]),
       data=st.data())
@example(name="sigmoid", dtype=np.float32, data=None)  # sigmoid(-20) was 0 in float32 (tanh form)
def test_unary_ops_match_numpy_in_float64(name, dtype, data):
    if data is None:
        a = np.array([-20.0, -90.0, -104.0, 15.0], dtype)
    else:
        a = data.draw(_arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
    op, ref, _ = UNARY[name]
    _close(_forward(op, a), _reference(ref, a), dtype, f"{name} of {a!r}")


@given(name=st.sampled_from(sorted(BINARY)), dtype=st.sampled_from([np.float32, np.float64]),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3),
       data=st.data())
def test_binary_ops_broadcast_and_match_numpy_in_float64(name, dtype, shapes, data):
    a = data.draw(_arrays(dtype, shapes.input_shapes[0]))
    b = data.draw(_arrays(dtype, shapes.input_shapes[1]))
    op, ref, _ = BINARY[name]
    out = _forward(op, a, b)
    assert out.shape == shapes.result_shape and out.dtype == dtype
    _close(out, _reference(ref, a, b), dtype, f"{name} of {a!r} and {b!r}")


def _axes(ndim):
    return st.one_of(st.none(), st.integers(-ndim, ndim - 1) if ndim else st.none(),
                     st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple)
                     if ndim else st.none())


REDUCTIONS = {"sum": (F.sum, np.sum), "mean": (F.mean, np.mean), "max": (F.max, np.max)}


@given(name=st.sampled_from(sorted(REDUCTIONS)), dtype=st.sampled_from([np.float32, np.float64]),
       keepdims=st.booleans(), data=st.data())
def test_reductions_match_numpy_in_float64(name, dtype, keepdims, data):
    a = data.draw(_arrays(dtype, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)))
    axis = data.draw(_axes(a.ndim))
    op, ref = REDUCTIONS[name]
    try:
        expected = _reference(lambda x: ref(x, axis=axis, keepdims=keepdims), a)
    except ValueError:  # max over nothing: NumPy and PyTorch refuse it, so must we
        with pytest.raises(ValueError):
            _forward(lambda t: op(t, axis=axis, keepdims=keepdims), a)
        return
    out = _forward(lambda t: op(t, axis=axis, keepdims=keepdims), a)
    assert out.dtype == dtype
    if name == "sum" and dtype == np.float32:  # float32 sums round at every addition
        np.testing.assert_array_equal(np.isnan(out), np.isnan(expected))
        magnitude = np.sum(np.abs(np.nan_to_num(a.astype(np.float64))), axis=axis, keepdims=keepdims)
        infinite = np.isinf(expected)  # an inf among the inputs: the same inf comes out
        np.testing.assert_array_equal(out[infinite], expected[infinite])
        checked = np.isfinite(expected) & (magnitude < np.finfo(np.float32).max / 2)
        with np.errstate(invalid="ignore"):
            error = np.abs(out.astype(np.float64) - expected)
        assert np.all(error[checked] <= 1e-6 * magnitude[checked] + 8 * np.finfo(np.float32).tiny), (a, axis)
        return
    _close(out, expected, dtype, f"{name}(axis={axis}, keepdims={keepdims}) of {a!r}")


def _domain_values(kind, shape, seed):
    rng = np.random.default_rng(seed)
    if kind == "pos":
        return rng.uniform(0.5, 2.0, shape)
    x = rng.uniform(-2.0, 2.0, shape)
    if kind == "nonzero":
        x = np.where(np.abs(x) < 0.1, 0.5, x)
    return x


@given(name=st.sampled_from(sorted(UNARY) + sorted(BINARY)), seed=st.integers(0, 2**16),
       shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, min_side=1, max_side=3))
def test_gradients_match_float64_central_differences(name, seed, shapes):
    op, ref, domain = UNARY.get(name) or BINARY[name]
    n = 1 if name in UNARY else 2
    arrays = [_domain_values(domain, s, seed + i) for i, s in enumerate(shapes.input_shapes[:n])]
    w, expected = numeric_grads(lambda *xs: ref(*xs), arrays)
    _, got = tinymem_grads(op, arrays, w)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-7, err_msg=name)


@given(name=st.sampled_from(sorted(REDUCTIONS)), seed=st.integers(0, 2**16), keepdims=st.booleans(),
       shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=3), data=st.data())
def test_reduction_gradients_match_float64_central_differences(name, seed, keepdims, shape, data):
    axis = data.draw(_axes(len(shape)))
    op, ref = REDUCTIONS[name]
    a = np.random.default_rng(seed).standard_normal(shape)  # distinct values: max has one winner
    w, expected = numeric_grads(lambda x: ref(x, axis=axis, keepdims=keepdims), [a])
    _, got = tinymem_grads(lambda t: op(t, axis=axis, keepdims=keepdims), [a], w)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5, atol=1e-7, err_msg=f"{name} axis={axis}")
