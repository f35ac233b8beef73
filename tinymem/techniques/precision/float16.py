"""float16 by hand: float32 <-> IEEE half precision by integer and float arithmetic on the bits.

NumPy converts between float32 and float16 one element at a time in C (3 to 5 ns per value on
the 2-core CPUs measured, as slow as the matmul whose output it stores). The same conversions
as whole-array arithmetic, bit for bit equal to ``astype``, measured on 2^17 values: encoding
takes 0.4-0.45x of astype's time, decoding 0.15-0.35x, rounding to float16 and back in one go
(what a gradient leaving a half module needs) about 0.2x of the two conversions. The layout::

    float32  s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm     (bias 127)
    float16  s eeeee mmmmmmmmmm                     (bias 15; subnormal below 2^-14)

Rounding (to nearest, ties to even, for every magnitude at once). Let a = |x| and k its float32
exponent, at least -14 (float16's smallest normal). Adding c = 2^(k + 13) to a leaves exactly
10 bits of a below c's leading bit, so the float addition itself rounds a to float16's grid,
ties to even; below 2^-14 (c = 0.5) the grid is float16's fixed 2^-24. Subtracting c again
leaves a rounded, still a float32.

Encoding: multiplying the rounded a by 2^-112 moves float32's exponent bias to float16's
(exact: float16's subnormals become float32 subnormals with the same 10 bits), and then the
float16 bits of a are the float32 bits shifted right by 13. A carry out of the significand
moves into the exponent by itself; past float16's range (65520 and up, infinity) the bits are
clamped to 0x7C00, infinity. NaN keeps NumPy's payload, the top 10 of its 23 significand bits
(0x7C01 if those are all zero); the sign is copied. The clamp and the NaN fix run only for a
chunk whose largest rounded magnitude says it needs them.

Decoding is the way back: the float16 bits, sign-extended to 32 and shifted left by 13, have
the sign in place (after clearing the three copies of it above the exponent); multiplying by
2^112 restores float32's bias, exact for normal and subnormal values alike. Exponent 31
(infinity, NaN) is mapped to float32's 255 separately.

Memory: the result (2 bytes per value encoded, 4 decoded or rounded) and two 4-byte temporaries
of at most ``CHUNK`` values: arrays are converted chunk by chunk. Works on NumPy and CuPy
arrays (only shared functions).
"""
import numpy as np

from ...backend import array_module

# Scalars made once: a NumPy scalar made per call costs a third of a pass over 2^16 values.
_ABS = np.uint32(0x7FFFFFFF)
_EXP = np.uint32(0x7F800000)
_MIN_K = np.uint32(113 << 23)   # float16's smallest normal, 2^-14
_C_SHIFT = np.uint32(13 << 23)  # c = 2^13 times a's power of two: 10 bits left below it
_INF16 = np.uint32(0x7C00)
_TO_F16_BIAS = np.float32(2.0 ** -112)  # float32's exponent bias 127 -> float16's 15
_TO_F32_BIAS = np.float32(2.0 ** 112)
_TWO_POW_16 = np.float32(65536.0)       # the first magnitude past float16's range, once rounded
_SHIFT_13, _SHIFT_16 = np.uint32(13), np.uint32(16)
_SIGN16, _SIGN32 = np.uint32(0x8000), np.uint32(0x80000000)
_DECODE_SHIFT, _SIGN_AND_MAGNITUDE, _ABS16 = np.int32(13), np.int32(-0x70000001), np.int16(0x7FFF)
# Values per pass: a chunk's temporaries (a few uint32 arrays, 256 KiB each) stay in the CPU's
# cache; over a whole large array each pass would go out to memory.
CHUNK = 1 << 16
# NumPy's integer maximum is vectorized between two arrays only; against a scalar it takes 3-4x
# as long. So on NumPy the lower bound of c is this constant array (256 KiB, made once).
_FLOOR = np.full(CHUNK, _MIN_K, np.uint32)


def _chunks(n):
    for start in range(0, n, CHUNK):
        yield slice(start, min(start + CHUNK, n))


def _round_magnitude(xp, a):
    """Round |x| (float32 patterns ``a``, in place) to float16's grid, nearest even: add c, the
    power of two 2^13 above a's leading bit (at least 0.5, float16's subnormal grid), and
    take it away again. Past float16's range the result is garbage (inf - inf gives NaN, hence
    the callers' ``errstate``), caught by the callers."""
    c = a & _EXP
    xp.maximum(c, _FLOOR[:c.size] if xp is np else _MIN_K, out=c)
    c += _C_SHIFT
    values, cf = a.view(np.float32), c.view(np.float32)
    values += cf
    values -= cf
    return c


def float32_to_float16(x):
    """float32 values rounded to float16 (nearest, ties to even), equal to ``x.astype(float16)``."""
    xp = array_module(x)
    shape = np.shape(x)  # before ascontiguousarray, which makes 0-d arrays 1-d
    x = xp.ascontiguousarray(x, dtype=np.float32)
    flat = x.reshape(-1).view(np.uint32)
    out = xp.empty(flat.size, np.uint16)
    # Once for all chunks (entering it costs as much as a pass over a small array): inf - inf
    # past the range, and float16's subnormals made float32 subnormals, exactly.
    with np.errstate(invalid="ignore", under="ignore"):
        for part in _chunks(flat.size):
            _encode(xp, flat[part], out[part])
    return out.view(np.float16).reshape(shape)


def _encode(xp, bits, out):
    """float16 patterns (uint16, into ``out``) of the float32 patterns ``bits`` (uint32)."""
    a = bits & _ABS
    c = _round_magnitude(xp, a)
    values = a.view(np.float32)
    in_range = values.max() < _TWO_POW_16  # False for overflow, infinity and NaN
    values *= _TO_F16_BIAS  # exact: float16's subnormals become float32 subnormals
    a >>= _SHIFT_13
    if not in_range:
        xp.minimum(a, _INF16, out=a)  # overflow and infinity
        nan = (bits & _ABS) > _EXP
        if nan.any():
            payload = (bits[nan] >> np.uint32(13)) & np.uint32(0x3FF)
            a[nan] = _INF16 | xp.maximum(payload, np.uint32(1))
    # The sign, moved to float16's place, in three integer passes. Shortcuts that look like fewer
    # passes are slower on NumPy 2.4 (measured on 2^16 values): ``copysign`` costs about six
    # passes' time, and copying out the high halves through a strided uint16 view about three.
    xp.right_shift(bits, _SHIFT_16, out=c)
    c &= _SIGN16
    a |= c
    xp.copyto(out, a, casting="unsafe")


def float16_to_float32(h):
    """The float32 values of float16 ``h`` (exact), equal to ``h.astype(float32)``."""
    xp = array_module(h)
    shape = np.shape(h)  # before ascontiguousarray, which makes 0-d arrays 1-d
    h = xp.ascontiguousarray(h, dtype=np.float16)
    flat = h.reshape(-1).view(np.int16)
    out = xp.empty(flat.size, np.int32)
    for part in _chunks(flat.size):
        _decode(xp, flat[part], out[part])
    return out.view(np.float32).reshape(shape)


def _decode(xp, h, out):
    """float32 patterns (int32, into ``out``) of the float16 patterns ``h`` (int16)."""
    xp.copyto(out, h)                  # sign-extended: the sign lands in bits 31 and 16-30
    out <<= _DECODE_SHIFT              # magnitude in bits 13-27, the sign copied into 28-31
    out &= _SIGN_AND_MAGNITUDE         # 0x8FFFFFFF: keep the sign bit, clear 28-30
    values = out.view(np.float32)
    values *= _TO_F32_BIAS
    magnitude = h & _ABS16
    if magnitude.max() >= 0x7C00:      # infinity and NaN: exponent 31 + 112 after the multiply
        out[magnitude >= 0x7C00] += np.int32(112 << 23)


def round_to_float16(x):
    """float32 values rounded to float16's grid and kept as float32, in one go: the values of
    ``float16_to_float32(float32_to_float16(x))`` for every non-NaN x (NaN stays NaN), with
    half the passes over the data. The same addition of c as the encoder rounds; subtracting c
    again leaves the rounded magnitude; past float16's largest value it becomes inf.
    Memory: the float32 result and one uint32 temporary per chunk."""
    xp = array_module(x)
    shape = np.shape(x)  # before ascontiguousarray, which makes 0-d arrays 1-d
    x = xp.ascontiguousarray(x, dtype=np.float32)
    flat = x.reshape(-1).view(np.uint32)
    out = xp.empty(flat.size, np.uint32)
    with np.errstate(invalid="ignore"):  # inf - inf past the range, fixed in _round
        for part in _chunks(flat.size):
            _round(xp, flat[part], out[part])
    return out.view(np.float32).reshape(shape)


def _round(xp, bits, out):
    xp.bitwise_and(bits, _ABS, out=out)
    c = _round_magnitude(xp, out)
    values = out.view(np.float32)
    if not values.max() < _TWO_POW_16:  # overflow, infinity, NaN, or rounding garbage
        values[xp.abs(bits.view(np.float32)) >= np.float32(65520.0)] = np.inf  # float16's inf
    xp.bitwise_and(bits, _SIGN32, out=c)
    out |= c
