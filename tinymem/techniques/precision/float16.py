"""float16 by hand: float32 <-> IEEE half precision, bit for bit ``astype``, on any device.

NumPy converts between float32 and float16 one element at a time in C (3 to 5 ns per value on
the 2-core CPUs measured, as slow as the matmul whose output it stores); these whole-array
conversions are bit for bit equal to ``astype``, NaN payloads included. The layout::

    float32  s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm     (bias 127)
    float16  s eeeee mmmmmmmmmm                     (bias 15; subnormal below 2^-14)

Flush to zero. A GPU's float32 kernels (CuPy's among them) treat subnormal float32 operands and
results as 0: ``1e-40 * 1.0`` is 0 there. So no float arithmetic here ever takes or makes a
float32 subnormal; everything else is integer arithmetic on the bits, which no device changes.

Encoding (round to nearest, ties to even). Let a = |x| and k its float32 exponent, at least -14
(float16's smallest normal). Adding c = 2^(k + 13) to a leaves exactly 10 bits of a below c's
leading bit, so the float addition itself rounds a to float16's grid, ties to even; below 2^-14
(c = 0.5) the grid is float16's fixed 2^-24. The sum lies in [c, 2c), a normal float32, and
its bits minus c's are the rounded a counted in steps of that grid: the float16 significand,
1024 + m for a normal value (2048 when rounding carried into the next power of two), m for a
subnormal one. Adding (E - 126) << 10, E being c's biased exponent, puts float16's exponent on
top: the float16 bits, carry included. A subnormal float32 a (below 2^-126) rounds to 0
whether the device flushes it or not. Past float16's range (65536 and up, infinity) the bits
are set to 0x7C00; 65520 up to 65536 rounds to it by itself. NaN keeps NumPy's payload, the
top 10 of its 23 significand bits (0x7C01 if those are all zero); the sign is copied. The fix
of the range runs only for a chunk whose largest magnitude says it needs one.

On a device (CuPy, or any module that is not NumPy) each conversion is CuPy's ``astype``: one
conversion kernel (``cvt.rn.f16.f32`` and back), exact in hardware whatever the device does to
float32 arithmetic, where the bit arithmetic below would be 13 kernels, a reduction and a host
sync. Rounding is the two conversions (2 kernels). NaN stays NaN there with the hardware's
payload. The arithmetic below is the CPU's: NumPy converts one element at a time, and never
flushes, so on the CPU decoding is the multiply by 2^112 (about 3/4 of a gather's time).

Memory: the result (2 bytes per value encoded, 4 decoded or rounded); on the CPU two 4-byte
temporaries of one chunk (64K values) when encoding or rounding; on a device, rounding's float16
intermediate (2 bytes per value). Works on NumPy and CuPy arrays (only shared functions).
"""
import numpy as np

from ...backend import array_module, chunk_elements

# Scalars made once: a NumPy scalar made per call costs a third of a pass over 2^16 values.
_ABS = np.uint32(0x7FFFFFFF)
_EXP = np.uint32(0x7F800000)
_MIN_K = np.uint32(113 << 23)   # float16's smallest normal, 2^-14
_C_SHIFT = np.uint32(13 << 23)  # c = 2^13 times a's power of two: 10 bits left below it
_GRID_EXP = np.uint32(126 << 10)  # c's smallest exponent (c = 0.5), float16's exponent 0
_RANGE_END = np.uint32(0x47800000)  # 65536.0: from here on the arithmetic leaves float16's range
_INF16 = np.uint32(0x7C00)
_TWO_POW_16 = np.float32(65536.0)       # the first magnitude past float16's range, once rounded
_SHIFT_13, _SHIFT_16 = np.uint32(13), np.uint32(16)
_SIGN16, _SIGN32 = np.uint32(0x8000), np.uint32(0x80000000)
_DECODE_SHIFT, _SIGN_AND_MAGNITUDE, _ABS16 = np.int32(13), np.int32(-0x70000001), np.int16(0x7FFF)
_TO_F32_BIAS = np.float32(2.0 ** 112)
# Values per pass on the CPU: a chunk's temporaries (a few uint32 arrays, 256 KiB each) stay in
# the CPU's cache; over a whole large array each pass would go out to memory.
CHUNK = 1 << 16
# NumPy's integer maximum is vectorized between two arrays only; against a scalar it takes 3-4x
# as long. So on NumPy the lower bound of c is this constant array (256 KiB, made once).
_FLOOR = np.full(CHUNK, _MIN_K, np.uint32)


def _chunks(xp, n):
    size = chunk_elements(xp, CHUNK)
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


def _grid_step(xp, a):
    """c for each magnitude ``a`` (float32 patterns): the power of two 2^13 above a's leading
    bit, at least 0.5 (float16's subnormal grid). a + c rounds a to float16's grid."""
    c = a & _EXP
    xp.maximum(c, _FLOOR[:c.size] if xp is np and c.size <= CHUNK else _MIN_K, out=c)
    c += _C_SHIFT
    return c


def float32_to_float16(x):
    """float32 values rounded to float16 (nearest, ties to even), equal to ``x.astype(float16)``."""
    xp = array_module(x)
    if xp is not np:  # one conversion kernel, exact in hardware
        return x.astype(np.float32, copy=False).astype(np.float16)
    shape = np.shape(x)  # before ascontiguousarray, which makes 0-d arrays 1-d
    x = xp.ascontiguousarray(x, dtype=np.float32)
    flat = x.reshape(-1).view(np.uint32)
    out = xp.empty(flat.size, np.uint16)
    # Once for all chunks (entering it costs as much as a pass over a small array): past the
    # range, c overflows and the sums are garbage, replaced afterwards.
    with np.errstate(over="ignore", invalid="ignore"):
        for part in _chunks(xp, flat.size):
            _encode(xp, flat[part], out[part])
    return out.view(np.float16).reshape(shape)


def _encode(xp, bits, out):
    """float16 patterns (uint16, into ``out``) of the float32 patterns ``bits`` (uint32)."""
    a = bits & _ABS
    in_range = a.max() < _RANGE_END  # False for overflow, infinity and NaN
    c = _grid_step(xp, a)
    values = a.view(np.float32)
    values += c.view(np.float32)  # rounds; the sum is in [c, 2c): a normal float32
    a -= c                  # the significand in grid steps: 1024 + m (normal), m (subnormal)
    c >>= _SHIFT_13         # c's exponent E in bits 10-17
    a += c
    a -= _GRID_EXP          # + (E - 126) << 10: float16's exponent on top of the significand
    if not in_range:
        magnitude = bits & _ABS
        a[magnitude >= _RANGE_END] = _INF16  # overflow and infinity
        nan = magnitude > _EXP
        if nan.any():
            payload = (bits[nan] >> _SHIFT_13) & np.uint32(0x3FF)
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
    if xp is not np:  # one conversion kernel, exact in hardware
        return h.astype(np.float16, copy=False).astype(np.float32)
    shape = np.shape(h)  # before ascontiguousarray, which makes 0-d arrays 1-d
    flat = np.ascontiguousarray(h, dtype=np.float16).reshape(-1).view(np.int16)
    out = np.empty(flat.size, np.int32)
    for part in _chunks(np, flat.size):
        _decode_on_the_cpu(flat[part], out[part])
    return out.view(np.float32).reshape(shape)


def _decode_on_the_cpu(h, out):
    """float32 patterns (int32, into ``out``) of the float16 patterns ``h`` (int16), by
    arithmetic that is exact where subnormal float32 values are kept (NumPy): the bits,
    sign-extended and shifted left by 13, with the sign's extra copies cleared, times 2^112
    (float16's exponent bias to float32's); exponent 31 (infinity, NaN) moved to 255."""
    np.copyto(out, h)                  # sign-extended: the sign lands in bits 31 and 16-30
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
    again leaves the rounded magnitude, a float16 value and so a normal float32 or 0 (nothing a
    flushing device changes); past float16's largest value it becomes inf.
    Memory: the float32 result and one uint32 temporary per chunk (on a device: the two
    conversions, 2 kernels, and a float16 intermediate)."""
    xp = array_module(x)
    if xp is not np:
        return x.astype(np.float32, copy=False).astype(np.float16).astype(np.float32)
    shape = np.shape(x)  # before ascontiguousarray, which makes 0-d arrays 1-d
    x = xp.ascontiguousarray(x, dtype=np.float32)
    flat = x.reshape(-1).view(np.uint32)
    out = xp.empty(flat.size, np.uint32)
    with np.errstate(invalid="ignore"):  # inf - inf past the range, fixed in _round
        for part in _chunks(xp, flat.size):
            _round(xp, flat[part], out[part])
    return out.view(np.float32).reshape(shape)


def _round(xp, bits, out):
    xp.bitwise_and(bits, _ABS, out=out)
    c = _grid_step(xp, out)
    values, cf = out.view(np.float32), c.view(np.float32)
    values += cf
    values -= cf
    if not values.max() < _TWO_POW_16:  # overflow, infinity, NaN, or rounding garbage
        values[xp.abs(bits.view(np.float32)) >= np.float32(65520.0)] = np.inf  # float16's inf
    xp.bitwise_and(bits, _SIGN32, out=c)
    out |= c
