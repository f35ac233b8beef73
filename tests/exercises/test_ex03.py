"""Checks for lesson 3, held against tinymem's quantization (itself held against PyTorch)."""
import numpy as np
import pytest

import tinymem as tm
from tinymem.techniques import quantization as Q
from tinymem.techniques.quantization import affine

pytestmark = pytest.mark.exercise_03


@pytest.mark.parametrize("lo,hi,qmin,qmax", [(-1.0, 3.0, 0, 255), (0.5, 2.0, 0, 255), (-4.0, -1.0, -128, 127),
                                             (-0.3, 7.7, 0, 15), (0.0, 0.0, 0, 255),
                                             # -min/scale exactly 2.5 and 3.5: how the tie is rounded shows
                                             (-1.25, 126.25, 0, 255), (-1.75, 125.75, 0, 255),
                                             # quant_min not 0, and the zero point not clamped to it
                                             (-1.0, 3.0, -128, 127), (-2.0, 5.0, 16, 235),
                                             # float32 and float64 give scales one bit apart
                                             (-3.03, 7.29, 0, 255), (-4.07, 9.13, -128, 127)])
def test_affine_qparams_match_the_observers(exercise, forbid, lo, hi, qmin, qmax):
    dtype = "qint8" if qmin < 0 else "quint8"
    es, ez = Q.qparams_from_minmax(lo, hi, "per_tensor_affine", dtype, qmin, qmax)
    forbid(Q.qparams_from_minmax)
    s, z = exercise("ex03").affine_qparams(lo, hi, qmin, qmax)
    assert np.float32(s) == es[0] and int(z) == ez[0]


@pytest.mark.parametrize("axis", [None, 1])
def test_fake_quant_and_its_gradient(exercise, forbid, axis):
    x = np.random.default_rng(0).standard_normal((10, 4, 5)).astype(np.float32) * 3
    scale, zero = (0.02, 100) if axis is None else (np.float32([0.02, 0.05, 0.01, 0.03]), np.array([100, 0, 255, 7]))
    t = tm.tensor(x, requires_grad=True)
    expected = Q.fake_quantize(t, scale, zero, 0, 255, axis=axis)
    expected.sum().backward()
    assert 0 < t.grad.numpy().mean() < 1  # some values were clamped, some were not
    forbid(Q.fake_quantize, Q.FakeQuantize, Q.quantize, Q.dequantize, affine._round_shift)
    mod = exercise("ex03")
    np.testing.assert_array_equal(mod.fake_quant(x, scale, zero, 0, 255, axis=axis), expected.numpy())
    g = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    np.testing.assert_array_equal(mod.fake_quant_grad(x, scale, zero, 0, 255, g, axis=axis), g * t.grad.numpy())


def _worst_case(k):
    """Row 0 and column 0 all 127 (odd products), row 1 and column 1 all -128 but for one 127:
    partial sums past 2**24 that a float32 cannot hold."""
    rng = np.random.default_rng(k)
    a = rng.integers(-128, 128, (3, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, 4)).astype(np.int8)
    a[0], b[:, 0], a[1], b[:, 1] = 127, 127, -128, -128
    a[1, 0], b[0, 1] = 127, 127
    return a, b


@pytest.mark.parametrize("k", [7, 1024, 1025, 5000, 100_000])
def test_exact_int8_matmul(exercise, forbid, k):
    a, b = _worst_case(k)
    forbid(Q.int_matmul)
    out = exercise("ex03").exact_int8_matmul(a, b)
    np.testing.assert_array_equal(np.asarray(out, np.int64), a.astype(np.int64) @ b.astype(np.int64))


def test_exact_int8_matmul_uses_float32_matmuls_only(exercise, forbid, monkeypatch):
    seen = []  # the dtypes of every matrix product the answer makes

    class Spy(np.ndarray):
        def __matmul__(self, other):
            seen.append((self.dtype, np.asarray(other).dtype))
            return np.asarray(self) @ np.asarray(other)

    def spied(real):
        def product(*args, **kwargs):
            seen.append(tuple(np.asarray(a).dtype for a in args if isinstance(a, np.ndarray)))
            return real(*[np.asarray(a) if isinstance(a, np.ndarray) else a for a in args], **kwargs)
        return product

    for name in ("dot", "matmul", "einsum", "tensordot", "inner"):
        monkeypatch.setattr(np, name, spied(getattr(np, name)))
    forbid(Q.int_matmul)
    a, b = _worst_case(3000)
    out = exercise("ex03").exact_int8_matmul(a.view(Spy), b.view(Spy))
    assert np.asarray(out).dtype == np.int32
    assert seen and all(set(dtypes) == {np.dtype(np.float32)} for dtypes in seen), f"products seen: {seen}"


def test_pack_2bit_round_trip(exercise):
    mod = exercise("ex03")
    codes = np.random.default_rng(0).integers(0, 4, 64).astype(np.uint8)
    packed = mod.pack_2bit(codes)
    assert packed.dtype == np.uint8 and packed.size == 16
    assert packed[0] == codes[0] | codes[1] << 2 | codes[2] << 4 | codes[3] << 6
    np.testing.assert_array_equal(mod.unpack_2bit(packed, 61), codes[:61])
