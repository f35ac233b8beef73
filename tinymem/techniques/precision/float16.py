"""float16 by hand: float32 <-> IEEE half precision by integer and float arithmetic on the bits.

NumPy converts between float32 and float16 one element at a time in C (3 to 5 ns per value on
the 2-core CPUs measured, as slow as the matmul whose output it stores). The same conversions
as whole-array arithmetic, bit for bit equal to ``astype``, measured on 2^16 to 2^21 values:
decoding takes 0.55-0.8x of astype's time, rounding to float16 and back in one go (what a
gradient leaving a half module needs) 0.4x of the two conversions; encoding's dozen passes
take 0.8-1.1x, no clear gain, so ``HalfFormat`` encodes with astype and decodes and rounds
here. The layout::

    float32  s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm     (bias 127)
    float16  s eeeee mmmmmmmmmm                     (bias 15; subnormal below 2^-14)

Encoding (round to nearest, ties to even, for every magnitude at once). Let a = |x| and k its
float32 exponent field clamped to [113, 143] (113 is float16's smallest normal exponent, 2^-14;
143 is 2^16, past its largest). Adding c = 2^(k - 127 + 13) to a leaves exactly 10 bits of a
below c's leading bit, so the float addition itself rounds a to float16's grid, ties to even;
in the subnormal range (k clamped to 113, c = 0.5) the grid is float16's fixed 2^-24. Then::

    bits(a + c) - bits(c)            = a's float16 significand, leading 1 included (0..2048)
    + (k - 113) << 10                = plus the float16 exponent: the float16 bits of a

A carry out of the significand moves into the exponent by itself, and a result at or past
2^16 (which includes float32 infinity) is clamped to 0x7C00, infinity. NaN keeps NumPy's
payload, the top 10 of its 23 significand bits (0x7C01 if those are all zero); the sign is
copied. Memory: the 2-byte result, and three uint32 temporaries of at most ``CHUNK`` values
(1.5 MiB): arrays are converted chunk by chunk.

Decoding shifts the 15 magnitude bits into place, ``(h & 0x7FFF) << 13``, and multiplies by
2^112 to move float16's exponent bias to float32's: exact for normal and subnormal values
alike. Exponent 31 (infinity, NaN) is mapped to float32's 255 separately. Memory: the float32
result and a uint16 temporary per chunk.

Works on NumPy and CuPy arrays (only shared functions).
"""
import numpy as np

from ...backend import array_module

_EXP = np.uint32(0x7F800000)
_MIN_K = np.uint32(113 << 23)   # float16's smallest normal, 2^-14
_MAX_K = np.uint32(143 << 23)   # 2^16: anything this large is float16 infinity
_C_SHIFT = np.uint32(13 << 23)  # c = 2^13 times a's power of two: 10 bits left below it
_INF16 = np.uint32(0x7C00)
# Values per pass: the dozen passes of a chunk run on temporaries (12 bytes per value, 1.5 MiB)
# that stay in the CPU's cache; over a whole large array each pass would go out to memory.
CHUNK = 1 << 17


def _chunks(n):
    for start in range(0, n, CHUNK):
        yield slice(start, min(start + CHUNK, n))


def float32_to_float16(x):
    """float32 values rounded to float16 (nearest, ties to even), equal to ``x.astype(float16)``."""
    xp = array_module(x)
    shape = np.shape(x)  # before ascontiguousarray, which makes 0-d arrays 1-d
    x = xp.ascontiguousarray(x, dtype=np.float32)
    flat = x.reshape(-1).view(np.uint32)
    out = xp.empty(flat.size, np.uint16)
    for part in _chunks(flat.size):
        xp.copyto(out[part], _encode(xp, flat[part]), casting="unsafe")
    return out.view(np.float16).reshape(shape)


def _encode(xp, bits):
    """float16 patterns (in uint32) of the float32 patterns ``bits``."""
    a = bits & np.uint32(0x7FFFFFFF)
    k = a & _EXP
    xp.maximum(k, _MIN_K, out=k)
    xp.minimum(k, _MAX_K, out=k)
    h = k + _C_SHIFT                                   # c's bits
    with np.errstate(invalid="ignore"):                # NaN + c: fixed below
        xp.add(a.view(np.float32), h.view(np.float32), out=h.view(np.float32))  # the rounding
    h -= k
    k >>= np.uint32(13)
    h += k                                             # + (k - 113) << 10, with the constant below
    h -= _C_SHIFT + np.uint32(113 << 10)
    xp.minimum(h, _INF16, out=h)                      # overflow and infinity
    nan = a > _EXP
    if nan.any():
        payload = (a[nan] >> np.uint32(13)) & np.uint32(0x3FF)
        h[nan] = _INF16 | xp.maximum(payload, np.uint32(1))
    xp.right_shift(bits, np.uint32(16), out=k)  # the sign, moved to float16's place
    k &= np.uint32(0x8000)
    h |= k
    return h


def float16_to_float32(h):
    """The float32 values of float16 ``h`` (exact), equal to ``h.astype(float32)``."""
    xp = array_module(h)
    shape = np.shape(h)  # before ascontiguousarray, which makes 0-d arrays 1-d
    h = xp.ascontiguousarray(h, dtype=np.float16)
    flat = h.reshape(-1).view(np.uint16)
    out = xp.empty(flat.size, np.uint32)
    for part in _chunks(flat.size):
        _decode(xp, flat[part], out[part])
    return out.view(np.float32).reshape(shape)


def _decode(xp, h, out):
    """float32 patterns of the float16 patterns ``h`` (uint16), written into ``out`` (uint32)."""
    magnitude = h & np.uint16(0x7FFF)
    xp.copyto(out, magnitude)
    out <<= np.uint32(13)
    special = magnitude >= np.uint16(0x7C00)           # infinity and NaN
    values = out.view(np.float32)
    values *= np.float32(2.0 ** 112)
    if special.any():
        out[special] += np.uint32(112 << 23)  # exponent 31 + 112 after the multiply; 255 wanted
    magnitude ^= h                                     # what is left is the sign bit
    out |= magnitude.astype(np.uint32) << np.uint32(16)


def round_to_float16(x):
    """float32 values rounded to float16's grid and kept as float32, in one go: the values of
    ``float16_to_float32(float32_to_float16(x))`` for every non-NaN x (NaN stays NaN), with
    half the passes over the data. The same addition of c as the encoder rounds; subtracting c
    again leaves the rounded magnitude; past float16's largest value it becomes inf.
    Memory: the float32 result and two uint32 temporaries per chunk."""
    xp = array_module(x)
    shape = np.shape(x)  # before ascontiguousarray, which makes 0-d arrays 1-d
    x = xp.ascontiguousarray(x, dtype=np.float32)
    flat = x.reshape(-1).view(np.uint32)
    out = xp.empty(flat.size, np.uint32)
    for part in _chunks(flat.size):
        _round(xp, flat[part], out[part])
    return out.view(np.float32).reshape(shape)


def _round(xp, bits, out):
    xp.bitwise_and(bits, np.uint32(0x7FFFFFFF), out=out)
    c = out & _EXP
    xp.maximum(c, _MIN_K, out=c)
    xp.minimum(c, _MAX_K, out=c)
    c += _C_SHIFT
    values, cf = out.view(np.float32), c.view(np.float32)
    with np.errstate(invalid="ignore"):  # NaN stays NaN
        values += cf
        values -= cf
    values[values >= np.float32(65536.0)] = np.inf  # (65520 and up round to 65536: float16 inf)
    xp.bitwise_and(bits, np.uint32(0x80000000), out=c)
    out |= c
