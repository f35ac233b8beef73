"""NF4, 4-bit NormalFloat (Dettmers et al. 2023): 16 levels at quantiles of N(0, 1).

A trained weight matrix is close to normal, so levels spaced like a normal's quantiles put
more levels where the weights are dense than a uniform grid does. The codes are still not used
equally: each block is scaled by its own largest |w|, which lies beyond the outermost level's
quantile in most blocks, so the outer codes are the rarest (lesson 13 measures the shares and
the entropy). The levels, as the paper builds them:

- 8 positive levels at the quantiles ``Phi^-1(p)`` for 9 probabilities p evenly spaced from
  ``delta`` down to 1/2 (the last, Phi^-1(1/2) = 0, dropped); 7 negative ones the same way from
  8 probabilities; and an exact 0. ``delta = ((1 - 1/30) + (1 - 1/32)) / 2`` keeps the outermost
  quantile finite (Phi^-1(1) is infinite).
- Scaled so the largest is 1: levels span [-1, 1], asymmetric (8 above zero, 7 below), and
  zero is exact, so padding and zeroed weights stay zero.

The rounding follows bitsandbytes' ``create_normal_map`` (bitsandbytes 0.50.2.dev0, commit
95f9af30), whose float32 results are the table that ``get_4bit_type("nf4")`` and its CUDA kernels
use: delta written as 0.9677083, the probabilities spaced in float32 (``torch.linspace``), the
quantiles rounded to float32, and the division by the largest done in float32. Computing it all in
float64 instead moves 12 of the 16 levels by up to 1.8e-7, enough for a weight equal to one of
bitsandbytes' levels to come back as its neighbour.

Storage of a weight of n values: blocks of 64 consecutive values share one scale, the block's
absolute maximum; each value keeps the 4-bit index of its nearest level, two indices per byte.
That is n/2 bytes of codes and 4·n/64 bytes of float32 scales: 4.5 bits per weight (double
quantization, in ``double_quant.py``, brings the scales to 8 bits: about 4.127).

Dequantizing ``level[code] · absmax`` reads one byte for two values: a 256-entry table of level
*pairs* turns each byte into both values in one gather (:func:`pair_table`).
"""
from statistics import NormalDist

import numpy as np

from ... import backend
from ...checks import is_int, positive_int
from ...optim.blockwise import Codebook, quantize as blockwise_quantize

BLOCK = 64  # values per absmax: the paper's block for the weights
CHUNK = 16384  # bytes of codes converted to gather indices at a time on NumPy (a 128 KiB index)


def _spaced32(start, stop, n):
    """``n`` float32 values from ``start`` to ``stop`` as ``torch.linspace`` makes them: a float32
    step, added to ``start`` for the first half and taken from ``stop`` for the second."""
    start, stop = np.float32(start), np.float32(stop)
    step = (stop - start) / np.float32(n - 1)
    return [start + step * np.float32(i) if i < n // 2 else stop - step * np.float32(n - 1 - i)
            for i in range(n)]


def nf4_levels():
    """The 16 NF4 levels, sorted, as float32 NumPy: bitsandbytes' table, bit for bit (the
    quantiles in float64, everything else in float32, as the module docstring says)."""
    delta = 0.9677083  # ((1 - 1/30) + (1 - 1/32)) / 2 = 0.96770833..., as bitsandbytes writes it
    quantile = NormalDist().inv_cdf
    positive = [quantile(float(p)) for p in _spaced32(delta, 0.5, 9)[:-1]]
    negative = [-quantile(float(p)) for p in _spaced32(delta, 0.5, 8)[:-1]]
    levels = np.sort(np.array(positive + negative + [0.0], np.float32))
    return levels / levels.max()


LEVELS = nf4_levels()
LEVELS.flags.writeable = False  # the tables below are made from it once: a change would reach only some
_CODEBOOKS, _PAIRS = {}, {}


def _codebook(xp):
    """The nearest-level finder for NF4 on ``xp``'s device (a 128 KiB table, made once)."""
    if xp.__name__ not in _CODEBOOKS:
        _CODEBOOKS[xp.__name__] = Codebook(xp.asarray(LEVELS))
    return _CODEBOOKS[xp.__name__]


def pair_table(xp):
    """(256, 2) float32: row b holds the levels of byte b's low and high 4 bits (2 KiB, made once)."""
    if xp.__name__ not in _PAIRS:
        byte = np.arange(256)
        _PAIRS[xp.__name__] = xp.asarray(np.stack([LEVELS[byte & 15], LEVELS[byte >> 4]], axis=1))
    return _PAIRS[xp.__name__]


def quantize_nf4(w, block=BLOCK):
    """``(packed, absmax)`` of a float32 array: uint8 codes two per byte (value 2i in the low
    4 bits of byte i), float32 absmax per block of ``block`` values. An odd size is padded
    with one zero. Temporaries while quantizing: 17 bytes per value (the search's 16, and one
    byte per code before packing), and one byte per value for the finiteness check.

    A non-finite value is refused: its block's absmax would be inf or NaN and every value of the
    block would come back NaN."""
    positive_int("quantize_nf4: block (values per scale)", block)
    xp = backend.array_module(w)
    if w.dtype.kind not in "biuf":  # a complex weight would lose its imaginary part in the cast
        raise TypeError(f"quantize_nf4 quantizes a real (float) weight, got {w.dtype}")
    flat = w.reshape(-1).astype(np.float32)
    finite = xp.isfinite(flat)
    if not bool(finite.all()):
        bad = int(flat.size - finite.sum())
        first = int(xp.flatnonzero(~finite)[0])
        raise ValueError(f"quantize_nf4: the weight holds {bad} non-finite value(s) (the first, {float(flat[first])}, "
                         f"at flat index {first}); a block's scale is its largest |value|, so one inf or NaN "
                         "would turn its whole block into NaN: find where the weight diverged and fix it first")
    del finite
    if flat.size % 2:
        flat = xp.concatenate([flat, xp.zeros(1, np.float32)])
    codes, absmax = blockwise_quantize(flat, _codebook(xp), block)
    packed = codes[0::2] | (codes[1::2] << 4)
    return packed.astype(np.uint8), absmax


def dequantize_nf4(packed, absmax, size, block=BLOCK, scratch=None):
    """The first ``size`` float32 values of ``level[code] · absmax``, flat.

    ``take`` gathers with intp indices (8 bytes per byte of codes; NumPy would convert uint8
    codes into such an array of its own, unseen). So the codes are converted ``CHUNK`` bytes
    at a time into one reused index: 128 KiB, not 4 bytes per weight. On CuPy, which gathers
    with any integer type, the whole array is one chunk.
    Memory: the result (4 bytes per value) and the index, both passed to ``scratch`` (the
    caller's ledger registration); the index is freed before the return."""
    if getattr(packed, "dtype", None) != np.uint8:  # wider codes would index past the 256 byte pairs
        raise TypeError(f"dequantize_nf4: packed must be the uint8 array of codes quantize_nf4 returned, got "
                        f"{getattr(packed, 'dtype', type(packed).__name__)}")
    for name, array in (("packed", packed), ("absmax", absmax)):
        if getattr(array, "ndim", 1) != 1:  # a reshaped array failed in a broadcast deep below
            raise ValueError(f"dequantize_nf4: {name} must be the flat array quantize_nf4 returned, "
                             f"got shape {tuple(array.shape)}")
    stored = 2 * packed.size
    if not is_int(size) or not 0 <= size <= stored:
        raise ValueError(f"dequantize_nf4: size must be an integer from 0 to {stored} (the values the "
                         f"{packed.size} bytes of codes hold), got {size!r}")
    positive_int("dequantize_nf4: block (values per scale)", block)
    dtype = getattr(absmax, "dtype", None)
    if dtype is None or dtype.kind != "f" or backend.device_of(absmax) != backend.device_of(packed):
        got = type(absmax).__name__ if dtype is None else f"{dtype} on {backend.device_of(absmax)}"
        raise TypeError("dequantize_nf4: absmax must be the float array of scales that quantize_nf4 returned with "
                        f"these codes, on their device ({backend.device_of(packed)}), got {got}")
    if absmax.size != -(-stored // block):
        raise ValueError(f"dequantize_nf4: {stored} values in blocks of {block} need {-(-stored // block)} "
                         f"scales, got {absmax.size}: pass the absmax that quantize_nf4 returned with these codes")
    xp = backend.array_module(packed)
    keep = scratch or (lambda a: a)
    values = keep(xp.empty((packed.size, 2), np.float32))
    table = pair_table(xp)
    if xp is np:
        index = keep(np.empty(min(CHUNK, packed.size), np.intp))
        for start in range(0, packed.size, CHUNK):
            part = index[:min(CHUNK, packed.size - start)]
            np.copyto(part, packed[start:start + part.size])
            table.take(part, axis=0, out=values[start:start + part.size])
        del index
    else:
        table.take(packed, axis=0, out=values)
    flat = values.reshape(-1)
    whole = flat.size - flat.size % block
    rows = flat[:whole].reshape(-1, block)
    rows *= absmax[:rows.shape[0], None]
    if whole < flat.size:
        flat[whole:] *= absmax[-1]
    return flat[:size]
