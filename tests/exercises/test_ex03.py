import numpy as np
import pytest

from tinymem.techniques import quantization as Q

pytestmark = pytest.mark.exercise_03


@pytest.mark.parametrize("lo,hi,qmin,qmax", [(-1.0, 3.0, 0, 255), (0.5, 2.0, 0, 255), (-4.0, -1.0, -128, 127),
                                             (-0.3, 7.7, 0, 15), (0.0, 0.0, 0, 255)])
def test_affine_qparams_match_the_observers(exercise, lo, hi, qmin, qmax):
    s, z = exercise("ex03").affine_qparams(lo, hi, qmin, qmax)
    dtype = "qint8" if qmin < 0 else "quint8"
    es, ez = Q.qparams_from_minmax(lo, hi, "per_tensor_affine", dtype, qmin, qmax)
    assert np.float32(s) == es[0] and int(z) == ez[0]


def test_fake_quant_and_its_gradient(exercise):
    mod = exercise("ex03")
    x = np.random.default_rng(0).standard_normal(500).astype(np.float32) * 3
    expected = Q.fake_quantize(x, 0.02, 100, 0, 255)
    np.testing.assert_array_equal(mod.fake_quant(x, 0.02, 100, 0, 255), expected.numpy())
    import tinymem as tm
    t = tm.tensor(x, requires_grad=True)
    Q.fake_quantize(t, 0.02, 100, 0, 255).sum().backward()
    g = np.ones_like(x)
    np.testing.assert_array_equal(mod.fake_quant_grad(x, 0.02, 100, 0, 255, g), t.grad.numpy())


@pytest.mark.parametrize("k", [7, 1024, 5000])
def test_exact_int8_matmul(exercise, k):
    rng = np.random.default_rng(k)
    a = rng.integers(-128, 128, (3, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, 4)).astype(np.int8)
    a[0], b[:, 0] = 127, 127
    out = exercise("ex03").exact_int8_matmul(a, b)
    np.testing.assert_array_equal(np.asarray(out, np.int64), a.astype(np.int64) @ b.astype(np.int64))


def test_pack_2bit_round_trip(exercise):
    mod = exercise("ex03")
    codes = np.random.default_rng(0).integers(0, 4, 64).astype(np.uint8)
    packed = mod.pack_2bit(codes)
    assert packed.dtype == np.uint8 and packed.size == 16
    assert packed[0] == codes[0] | codes[1] << 2 | codes[2] << 4 | codes[3] << 6
    np.testing.assert_array_equal(mod.unpack_2bit(packed, 61), codes[:61])
