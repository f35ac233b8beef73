"""The half codecs, bit for bit, on every device and under flush-to-zero: float16 against
NumPy's astype, bfloat16 against round-to-nearest-even computed in float64; the one-pass
roundings against encode-then-decode; the chunk size changes nothing."""
import numpy as np
import pytest

from tinymem import backend
from tinymem.techniques.precision import bfloat16 as BF16
from tinymem.techniques.precision import float16 as F16
from tinymem.techniques.precision import get_format
from tinymem.techniques.precision.bfloat16 import (bfloat16_bits_to_float32, float32_to_bfloat16_bits,
                                                   round_to_bfloat16)

_TINY32 = np.finfo(np.float32).tiny


def _classes():
    """One or more float32 of every class: zeros, subnormals, normals in float16's subnormal,
    normal and overflow ranges, the rounding boundaries, infinities and NaNs with payloads."""
    f16 = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    exact = f16[np.isfinite(f16)].astype(np.float32)
    up, down = np.nextafter(exact, np.float32(np.inf)), np.nextafter(exact, np.float32(-np.inf))
    halfway = ((exact[:-1].astype(np.float64) + exact[1:]) / 2).astype(np.float32)  # ties, both parities
    bits = np.array([0, 0x80000000, 1, 0x807FFFFF, 0x00800000, 0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000,
                     0xFF800000, 0x7F800001, 0x7FC00000, 0xFFC00001, 0x7FBFFFFF, 0x7F802000,
                     0x33000000, 0x33000001, 0x32FFFFFF, 0x477FE000, 0x477FEFFF, 0x477FF000],
                    dtype=np.uint32).view(np.float32)
    return np.concatenate([exact, up, down, halfway, -halfway, bits])


@pytest.mark.parametrize("which", ["classes", "random values", "random bit patterns"])
def test_encoder_equals_numpy_astype_bit_for_bit(which, device):
    rng = np.random.default_rng(0)
    if which == "classes":
        x = _classes()
    elif which == "random values":
        x = (rng.standard_normal(10 ** 6) * np.exp(rng.uniform(-25, 15, 10 ** 6))).astype(np.float32)
    else:
        x = rng.integers(0, 2 ** 32, 10 ** 6, dtype=np.uint64).astype(np.uint32).view(np.float32)
    with np.errstate(all="ignore"):
        expected = x.astype(np.float16).view(np.uint16)
    got = backend.to_numpy(F16.float32_to_float16(backend.to_device(x, device))).view(np.uint16)
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, f"{bad.size} differ, e.g. {x[bad[:3]]}: {got[bad[:3]]} vs {expected[bad[:3]]}"


def test_decoder_equals_numpy_astype_on_every_float16(device):
    every = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    got = backend.to_numpy(F16.float16_to_float32(backend.to_device(every, device)))
    assert np.array_equal(got.view(np.uint32), every.astype(np.float32).view(np.uint32))


def test_round_trip_in_one_go_equals_encode_then_decode():
    x = _classes()
    x = np.concatenate([x, np.random.default_rng(1).standard_normal(10 ** 5).astype(np.float32)])
    with np.errstate(all="ignore"):
        expected = x.astype(np.float16).astype(np.float32)
    got = F16.round_to_float16(x)
    nan = np.isnan(x)
    assert np.array_equal(got[~nan].view(np.uint32), expected[~nan].view(np.uint32))
    assert np.isnan(got[nan]).all()
    assert np.array_equal(round_to_bfloat16(x).view(np.uint32),
                          bfloat16_bits_to_float32(float32_to_bfloat16_bits(x)).view(np.uint32))


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_format_round_keeps_shape_and_dtype(name):
    x = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    fmt = get_format(name)
    r = fmt.round(x)
    assert r.shape == x.shape and r.dtype == np.float32
    assert np.array_equal(r, fmt.decode(fmt.encode(x), np.float32))


def _bfloat16_classes():
    """Every bfloat16 value as float32, its float32 neighbours, the exact ties between it and
    the next one (both parities) and the patterns beside them; NaNs with payloads."""
    patterns = np.arange(2 ** 16, dtype=np.uint32) << 16
    return np.concatenate([patterns, patterns + 1, patterns - 1, patterns | 0x8000, patterns | 0x8001,
                           patterns | 0x7FFF, np.array([0x7F800001, 0xFFBFFFFF, 0x7FFF8000], np.uint32)]
                          ).view(np.float32)


def _bfloat16_reference(x):
    """Round to nearest, ties to even, in float64: the grid step is 2^(e - 7) for 2^e <= |x| <
    2^(e + 1), e >= -126 (2^-133 below: bfloat16's subnormals); past float32's range, inf.
    NaN is the canonical 0x7FC0."""
    with np.errstate(invalid="ignore"):  # a signalling NaN becomes quiet: still NaN
        x64 = x.astype(np.float64)
    finite = np.isfinite(x64)
    e = np.maximum(np.frexp(np.where(finite, x64, 1.0))[1] - 1, -126)
    step = np.ldexp(1.0, e - 7)
    rounded = np.where(finite, np.round(x64 / step) * step, x64)  # np.round: half to even
    with np.errstate(over="ignore"):
        bits = rounded.astype(np.float32).view(np.uint32)  # exact, or inf from 2^128 up
    out = (bits >> 16).astype(np.uint16)
    out[np.isnan(x)] = BF16.BFLOAT16_NAN
    return out


@pytest.mark.parametrize("which", ["classes", "random bit patterns"])
def test_bfloat16_encoder_rounds_to_nearest_even_bit_for_bit(which, device):
    if which == "classes":
        x = _bfloat16_classes()
    else:
        x = np.random.default_rng(2).integers(0, 2 ** 32, 10 ** 6, dtype=np.uint64).astype(np.uint32).view(np.float32)
    got = backend.to_numpy(float32_to_bfloat16_bits(backend.to_device(x, device)))
    expected = _bfloat16_reference(x)
    bad = np.flatnonzero(got != expected)
    assert bad.size == 0, f"{bad.size} differ, e.g. {x[bad[:3]]}: {got[bad[:3]]} vs {expected[bad[:3]]}"
    rounded = backend.to_numpy(round_to_bfloat16(backend.to_device(x, device))).view(np.uint32)
    assert np.array_equal(rounded, expected.astype(np.uint32) << 16)
    decoded = backend.to_numpy(bfloat16_bits_to_float32(backend.to_device(expected, device)))
    assert np.array_equal(decoded.view(np.uint32), expected.astype(np.uint32) << 16)


# -- flush to zero ----------------------------------------------------------------------------
# CuPy's float32 kernels on a GPU (an H200 here) flush subnormal operands and results to zero:
# there the first float16 codec turned every float16 subnormal into 0. NumPy never flushes, so
# these tests run the codecs on NumPy arrays that do: Flushing arrays, served by FlushingNumPy
# in place of CuPy (any module that is not NumPy takes the GPU's chunk size too).

def _flushed(a):
    """``a`` with its float32 subnormals made +-0 (a copy when there are any)."""
    if a.dtype != np.float32 or not ((a != 0) & (np.abs(a) < _TINY32)).any():
        return a
    return np.where((a != 0) & (np.abs(a) < _TINY32), np.copysign(np.float32(0), a), a)


class Flushing(np.ndarray):
    """A NumPy array whose float32 ufuncs see and make no subnormals, as on a flushing GPU."""

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kwargs):
        plain = [_flushed(x.view(np.ndarray)) if isinstance(x, np.ndarray) else x for x in inputs]
        if out is not None:
            kwargs["out"] = tuple(o.view(np.ndarray) for o in out)
        result = getattr(ufunc, method)(*plain, **kwargs)
        outputs = result if isinstance(result, tuple) else (result,)
        for r in outputs:
            if isinstance(r, np.ndarray) and r.dtype == np.float32:
                np.copyto(r, _flushed(r))
        if isinstance(result, np.ndarray):
            return out[0] if out is not None else result.view(Flushing)
        return _flushed(np.asarray(result)).view(Flushing) if isinstance(result, np.generic) else result


class FlushingNumPy:
    """The array module of :class:`Flushing` arrays: NumPy's, with array results made Flushing."""

    def __getattr__(self, name):
        value = getattr(np, name)
        if isinstance(value, (np.ufunc, type)) or not callable(value):
            return value
        return lambda *args, **kwargs: _as_flushing(value(*args, **kwargs))


def _as_flushing(value):
    return value.view(Flushing) if isinstance(value, np.ndarray) else value


@pytest.fixture
def flushing(monkeypatch):
    """Put ``x`` on the flushing stand-in: the codecs then take FlushingNumPy as their module."""
    module = FlushingNumPy()
    for codec in (F16, BF16):
        real = codec.array_module
        monkeypatch.setattr(codec, "array_module", lambda a, real=real: module if isinstance(a, Flushing) else real(a))
    assert (np.array([1e-40], np.float32).view(Flushing) * np.float32(1)) == 0  # it flushes
    return lambda x: x.copy().view(Flushing)


def test_float16_codec_is_exact_where_float32_arithmetic_flushes_subnormals(flushing):
    every = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    decoded = F16.float16_to_float32(flushing(every)).view(np.ndarray)
    assert np.array_equal(decoded.view(np.uint32), every.astype(np.float32).view(np.uint32))
    x = np.concatenate([_classes(), np.random.default_rng(3).integers(0, 2 ** 32, 10 ** 5, dtype=np.uint64)
                        .astype(np.uint32).view(np.float32)])
    with np.errstate(all="ignore"):
        expected = x.astype(np.float16)
    encoded = F16.float32_to_float16(flushing(x)).view(np.ndarray)
    assert np.array_equal(encoded.view(np.uint16), expected.view(np.uint16))
    rounded = F16.round_to_float16(flushing(x)).view(np.ndarray)
    nan = np.isnan(x)
    assert np.array_equal(rounded[~nan].view(np.uint32), expected[~nan].astype(np.float32).view(np.uint32))


def test_bfloat16_codec_is_exact_where_float32_arithmetic_flushes_subnormals(flushing):
    x = _bfloat16_classes()
    expected = _bfloat16_reference(x)
    assert np.array_equal(float32_to_bfloat16_bits(flushing(x)).view(np.ndarray), expected)
    assert np.array_equal(round_to_bfloat16(flushing(x)).view(np.ndarray).view(np.uint32),
                          expected.astype(np.uint32) << 16)


@pytest.mark.parametrize("chunk", [1000, 4099, 10 ** 8])
def test_the_chunk_size_changes_no_bit(chunk, monkeypatch):
    """Chunks of 1000 or 4099 values (a short last one) or the whole array, as on a GPU, give
    the bits of the default chunks."""
    x = np.concatenate([_classes(), np.random.default_rng(4).standard_normal(10 ** 5).astype(np.float32)])
    every = np.arange(2 ** 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    codecs = [(F16.float32_to_float16, x), (F16.round_to_float16, x), (F16.float16_to_float32, every),
              (float32_to_bfloat16_bits, x)]
    with np.errstate(all="ignore"):
        before = [f(a).view(np.uint8) for f, a in codecs]
    for codec in (F16, BF16):
        monkeypatch.setattr(codec, "chunk_elements", lambda xp, cpu_default: chunk)
    with np.errstate(all="ignore"):
        after = [f(a).view(np.uint8) for f, a in codecs]
    for (f, _), b, a in zip(codecs, before, after):
        assert np.array_equal(a, b), f.__name__
