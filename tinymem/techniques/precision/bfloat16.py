"""bfloat16 by hand: float32 <-> bfloat16 as uint16 bit patterns.

bfloat16 is the top half of a float32: 1 sign bit, the same 8 exponent bits (so the same range,
about 1.2e-38 to 3.4e38, and no loss scaling is needed), and 7 stored mantissa bits instead
of 23 (8 bits of precision: about 2-3 decimal digits)::

    float32   s eeeeeeee mmmmmmmmmmmmmmmmmmmmmmm
    bfloat16  s eeeeeeee mmmmmmm                   (the top 16 bits)

NumPy and CuPy have no bfloat16 dtype, so tinymem stores bfloat16 as ``uint16`` arrays of those
bits: 2 bytes per value, half of float32. Computing needs float32 again
(:func:`bfloat16_bits_to_float32`), which is exact: append 16 zero bits.

Rounding float32 -> bfloat16 is round-to-nearest, ties-to-even, done with integer arithmetic on
the bits (the trick PyTorch's ``c10::BFloat16`` uses)::

    bits16 = (bits32 + 0x7FFF + ((bits32 >> 16) & 1)) >> 16

Adding 0x7FFF carries into bit 16 exactly when the dropped low half is above one half ulp; the
``+ lsb`` term breaks a tie towards the even neighbour. The carry may ripple into the exponent,
which is right (1.9999999 rounds to 2.0), and from the largest finite exponent into infinity
(float32's max, 3.4028235e38, rounds to +inf, as in PyTorch). Subnormals and -0.0 need no
special case. Only NaN does: the carry could turn a NaN with a small payload into infinity, so
every NaN becomes the canonical quiet NaN 0x7FC0.

Every step that makes a value is integer arithmetic on the bits, so the codec is exact on any
device, GPUs whose float32 kernels flush subnormals to zero included (a subnormal float32
rounds to the bfloat16 subnormal of its top 7 significand bits, never to 0). Only the test for
NaN is a float maximum and ``isnan``, which a flushed subnormal cannot change.

PyTorch agrees bit for bit on every non-NaN float32. For NaN, PyTorch itself is not consistent:
its scalar conversion gives 0x7FC0, its vectorized CPU kernel gives 0xFFFF; both are NaN.

On a device each of the three functions is one fused kernel (``tinymem.fused``: the rounding
and the NaN fix in registers, 6 bytes moved per value encoded, 6 decoded, 8 rounded), where the
ufuncs below would be 6 kernels, a reduction and a host sync; the tests run the kernels' Python
bodies against the CPU code on every input class.

Memory: on the CPU the encoder makes one uint32 temporary of one chunk (``CHUNK`` = 64K values,
256 KiB) and returns 2 bytes per value; on a device, only the result. Works on NumPy and CuPy
arrays alike (only shared functions).
"""
import numpy as np

from ...backend import array_module, chunk_elements
from ...fused import Kernel

BFLOAT16_NAN = 0x7FC0
CHUNK = 1 << 16  # values per pass of the encoder on the CPU
# Scalars made once: on small arrays (a 32 x 32 weight) making them per call costs as much as
# the arithmetic.
_ONE, _SIXTEEN, _BELOW_HALF = np.uint32(1), np.uint32(16), np.uint32(0x7FFF)
_LOW_HALF_CLEARED = np.uint32(0xFFFF0000)


def _rounded_bits(ops, x):
    """float32 ``x`` rounded to bfloat16, nearest, ties to even, in the low-cleared float32
    bits (uint32); every NaN the canonical quiet NaN."""
    bits = ops.bitcast(x, np.uint32)
    rounded = (bits + _BELOW_HALF + ((bits >> _SIXTEEN) & _ONE)) & _LOW_HALF_CLEARED
    return ops.where(ops.isnan(x), np.uint32(BFLOAT16_NAN << 16), rounded)


_ENCODE = Kernel("bf16_encode", "float32 x", "uint16 bits", lambda ops, x, bits: (_rounded_bits(ops, x) >> _SIXTEEN,))
_DECODE = Kernel("bf16_decode", "uint16 bits", "float32 x",
                 lambda ops, bits, x: (ops.bitcast(ops.cast(bits, np.uint32) << _SIXTEEN, np.float32),))
_ROUND = Kernel("bf16_round", "float32 x", "float32 y",
                lambda ops, x, y: (ops.bitcast(_rounded_bits(ops, x), np.float32),))


def float32_to_bfloat16_bits(x):
    """Round float32 values to bfloat16 (nearest, ties to even); return the bits as uint16.

    ``x`` is a NumPy or CuPy array; other float dtypes are cast to float32 first.

    Pitfall: float64 input is first rounded to float32 here, then to bfloat16: a double
    rounding that can differ from PyTorch's direct float64 -> bfloat16 in rare ties. Pass
    float32 when bit-exactness matters.
    """
    xp = array_module(x)
    x = xp.asarray(x, dtype=np.float32)
    if xp is not np:
        return _ENCODE(x, xp.empty(x.shape, np.uint16))
    shape = x.shape
    x = x.reshape(-1)  # a 0-d array would turn into NumPy scalars below, which are immutable
    bits = x.view(np.uint32)
    rounded = xp.empty(x.size, np.uint16)
    chunk = chunk_elements(xp, CHUNK)  # on the CPU, a chunk's temporary stays in the cache
    for start in range(0, x.size, chunk):
        part = bits[start:start + chunk]
        r = part >> _SIXTEEN
        r &= _ONE  # lsb: the last bit kept, for ties to even
        r += part
        r += _BELOW_HALF
        r >>= _SIXTEEN
        xp.copyto(rounded[start:start + chunk], r, casting="unsafe")
    if _has_nan(xp, x):  # NaN is rare: fix those few instead of a select over every value
        rounded[xp.isnan(x)] = np.uint16(BFLOAT16_NAN)
    return rounded.reshape(shape)


def bfloat16_bits_to_float32(bits):
    """The float32 values of bfloat16 bit patterns (uint16): exact, the bits shifted up by 16."""
    xp = array_module(bits)
    bits = xp.asarray(bits)
    if bits.dtype != np.uint16:
        raise TypeError(f"bfloat16 bits must be a uint16 array, got {bits.dtype}; "
                        "make them with float32_to_bfloat16_bits")
    if xp is not np:
        return _DECODE(bits, xp.empty(bits.shape, np.float32))
    out = bits.astype(np.uint32)
    out <<= _SIXTEEN  # in place: one 4-byte array, not two
    return out.view(np.float32)


def round_to_bfloat16(x):
    """float32 values rounded to the nearest bfloat16, still as float32: the same rounding as
    :func:`float32_to_bfloat16_bits` with the low 16 bits cleared instead of shifted out, so no
    uint16 array is made. Memory: one uint32 temporary and the float32 result (8 bytes per value)."""
    xp = array_module(x)
    x = xp.asarray(x, dtype=np.float32)
    if xp is not np:
        return _ROUND(x, xp.empty(x.shape, np.float32))
    shape = x.shape
    x = x.reshape(-1)  # as above: no 0-d arrays, whose arithmetic gives immutable scalars
    bits = x.view(np.uint32)
    out = bits >> _SIXTEEN
    out &= _ONE
    out += bits
    out += _BELOW_HALF
    out &= _LOW_HALF_CLEARED
    if _has_nan(xp, x):
        out[xp.isnan(x)] = np.uint32(BFLOAT16_NAN << 16)
    return out.view(np.float32).reshape(shape)


def _has_nan(xp, x):
    """Whether flat ``x`` holds a NaN: its maximum is NaN exactly then (one reduction, no mask),
    and NaN is the one value not equal to itself."""
    largest = x.max() if x.size else 0
    return bool(largest != largest)
