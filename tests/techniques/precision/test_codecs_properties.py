"""Property tests (Hypothesis) of the half-precision codecs: the float16 format against NumPy's
float16 cast, the bfloat16 bits against PyTorch's bfloat16, bit for bit, on float32 values of
every kind (0, -0, subnormals, +-inf, NaN, the largest finite, empty and 0-d arrays)."""
import numpy as np
from conftest import requires_torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from tinymem.techniques.precision.bfloat16 import bfloat16_bits_to_float32, float32_to_bfloat16_bits
from tinymem.techniques.precision.formats import get_format

F32 = np.finfo(np.float32)
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, float(F32.max), -float(F32.max), float(F32.tiny),
           float(F32.smallest_subnormal), 65504.0, 65520.0, 2.0 ** -24, 2.0 ** -25, 1.0 + 2.0 ** -8]
values = st.one_of(st.floats(width=32), st.sampled_from(SPECIAL))
float32_arrays = hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
                            elements=values)
# every float32 bit pattern, NaN payloads included
bit_patterns = hnp.arrays(np.uint32, hnp.array_shapes(min_dims=1, max_dims=1, max_side=64)).map(
    lambda b: b.view(np.float32))


def _same_bits(a, b, dtype, nan_a=None, nan_b=None):
    """Equal bit patterns, except that any NaN may stand for any NaN (for bit arrays, pass
    where each one holds a NaN)."""
    nan_a = np.isnan(a) if nan_a is None else nan_a
    nan_b = np.isnan(b) if nan_b is None else nan_b
    assert a.shape == b.shape and np.array_equal(nan_a, nan_b)
    assert np.array_equal(a[~nan_a].view(dtype), b[~nan_a].view(dtype))


@given(st.one_of(float32_arrays, bit_patterns))
def test_float16_format_is_numpys_cast_and_decodes_exactly(x):
    fmt = get_format("float16")
    stored = fmt.encode(x)
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16)
    assert stored.dtype == np.float16 and stored.shape == x.shape
    _same_bits(stored, expected, np.uint16)
    _same_bits(fmt.decode(stored), expected.astype(np.float32), np.uint32)


@requires_torch
@given(st.one_of(float32_arrays, bit_patterns))
def test_bfloat16_bits_are_torchs(x):
    import torch
    bits = float32_to_bfloat16_bits(x)
    theirs = torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16)
    their_bits = theirs.view(torch.int16).numpy().view(np.uint16).reshape(x.shape)
    their_floats = theirs.float().numpy().reshape(x.shape)
    assert bits.dtype == np.uint16 and bits.shape == x.shape
    ours = bfloat16_bits_to_float32(bits)
    _same_bits(bits, their_bits, np.uint16, np.isnan(ours), np.isnan(their_floats))
    _same_bits(ours, their_floats, np.uint32)


@given(float32_arrays)
def test_bfloat16_rounds_to_the_nearest_representable_value(x):
    """Within half a bfloat16 step of x (the step is 2**(e - 7) for 2**e <= |x| < 2**(e+1),
    e >= -126), where x is finite and its rounding stays finite; idempotent everywhere."""
    fmt = get_format("bfloat16")
    back = fmt.decode(fmt.encode(x)).astype(np.float64)
    again = fmt.decode(fmt.encode(back.astype(np.float32)))
    _same_bits(again, back.astype(np.float32), np.uint32)
    x64 = x.astype(np.float64)
    ok = np.isfinite(x64) & np.isfinite(back)
    exponent = np.maximum(np.frexp(x64)[1] - 1, -126)
    half_step = np.ldexp(1.0, exponent - 8)
    assert np.all(np.abs(back[ok] - x64[ok]) <= half_step[ok])


def test_zero_d_arrays_keep_their_shape_and_nan():
    """Found by Hypothesis: a 0-d NaN made the bfloat16 encoder assign into a NumPy scalar, and
    the float16 codecs returned 0-d input as shape (1,)."""
    from tinymem.techniques.precision import float16
    from tinymem.techniques.precision.bfloat16 import round_to_bfloat16
    for value in (np.nan, 1.0, -np.inf, 3e-6):
        x = np.array(value, np.float32)
        bits = float32_to_bfloat16_bits(x)
        assert bits.shape == () and bits.dtype == np.uint16
        assert np.isnan(bfloat16_bits_to_float32(bits)) == np.isnan(x)
        assert round_to_bfloat16(x).shape == ()
        half = float16.float32_to_float16(x)
        assert half.shape == () and (half == x.astype(np.float16) or np.isnan(value))
        assert float16.float16_to_float32(half).shape == float16.round_to_float16(x).shape == ()
