"""Block-wise 8-bit quantization of optimizer state (Dettmers et al., 2022).

A tensor is cut into blocks of ``block_size`` consecutive elements. Each block keeps one
float32 scale, its absolute maximum A, and each element keeps a 1-byte code: the index of the
nearest value of a 256-entry *quantization map* to x / A. Dequantizing is ``map[code] * A``.
Storage: n + 4·ceil(n / block_size) bytes for n elements, about 1.002 bytes per element at
block 2048, against 4 in float32.

Two maps:
- :func:`dynamic_map` — the paper's dynamic (tree) map: one bit for the sign, then the number
  of leading zero bits picks a power of ten and the remaining bits a linear fraction. Values
  from 1e-7 to 1 are all represented with a similar *relative* error, which matters for Adam's
  second moment, whose entries span many orders of magnitude inside one block.
- :func:`linear_map` — 256 evenly spaced values: the same absolute error everywhere, so small
  entries of a block collapse to zero (the comparison that shows why the dynamic map exists).

Per-block error bound: |x - dequantize(quantize(x))| <= A · max_gap / 2, where max_gap is the
largest distance between neighbouring map values (0.0141 for the signed dynamic map, 1/127 for the
signed linear map); block-wise scaling confines an outlier's damage to its own block.
"""
import math
import sys

import numpy as np

from .. import backend


def dynamic_map(signed=True, max_exponent_bits=7, total_bits=8):
    """The 256 sorted values of bitsandbytes' ``create_dynamic_map``, as float32 NumPy."""
    data = []
    non_sign_bits = total_bits - 1
    for i in range(max_exponent_bits):
        items = 2 ** (i + non_sign_bits - max_exponent_bits + (0 if signed else 1)) + 1
        bounds = np.linspace(0.1, 1, items)
        means = (bounds[:-1] + bounds[1:]) / 2.0
        scale = 10.0 ** (-(max_exponent_bits - 1) + i)
        data += (scale * means).tolist()
        if signed:
            data += (-scale * means).tolist()
    data += [0.0, 1.0]
    data += [0.0] * (2 ** total_bits - len(data))
    return np.array(sorted(data), dtype=np.float32)


def linear_map(signed=True, total_bits=8):
    """Evenly spaced values: k / 127 for k = -128..127 (signed, symmetric int8: 0 is exact and
    the code for -1.008 is never chosen), or ``2**total_bits`` values on [0, 1] (unsigned)."""
    if signed:
        half = 2 ** (total_bits - 1)
        return (np.arange(-half, half) / (half - 1)).astype(np.float32)
    return np.linspace(0.0, 1.0, 2 ** total_bits, dtype=np.float32)


MAPS = {"dynamic": dynamic_map, "linear": linear_map}


def num_blocks(n, block_size):
    return math.ceil(n / block_size)


def _blocks(flat, block_size, xp):
    """``flat`` padded with zeros to whole blocks, as a (blocks, block_size) array."""
    pad = (-flat.size) % block_size
    if pad:
        flat = xp.concatenate([flat, xp.zeros(pad, flat.dtype)])
    return flat.reshape(-1, block_size)


def _uncounted(array):
    return array


_HIGH = 1 if sys.byteorder == "little" else 0  # which uint16 of a float32 holds its top bits


class Codebook:
    """A quantization map and the table that finds each value's nearest code without a search.

    The nearest code of x is the number of midpoints (between neighbouring map values) below x:
    what a binary search over the midpoints finds, 8 data-dependent steps per value. Instead,
    the top 16 bits of x's float32 pattern (sign, exponent, 7 mantissa bits) pick a bucket of
    floats narrow enough (2^-7 of its values) to hold at most one midpoint; ``table[bucket]`` is
    the number of midpoints below the bucket, and one comparison with the next midpoint
    finishes::

        below = table[top16(x)]                 # a 64 KiB uint8 table, read in place
        code  = below + (x > midpoints[below])  # midpoints[255] = inf

    Two gathers from small tables and two elementwise passes, against a search 15x slower.
    Building checks every bucket (the dynamic map's closest midpoints are 1.4% apart), and
    the codes equal the search's bit for bit: a test holds them on every midpoint, its float32
    neighbours, the map's values, signed zeros and a million random values.
    Memory: the table (2**16 bytes) and the padded midpoints (256 float32), once per map.
    """

    def __init__(self, values):
        xp = backend.array_module(values)
        self.values = values
        mid = backend.to_numpy((values[1:] + values[:-1]) / 2).astype(np.float32)  # as a search sees them
        self.table = xp.asarray(_bucket_table(mid))
        self.midpoints = xp.asarray(np.append(mid, np.float32(np.inf)))

    @property
    def nbytes(self):
        return self.values.nbytes + self.table.nbytes + self.midpoints.nbytes

    def codes(self, x, scratch=_uncounted):
        """Nearest-code indices (uint8) of a contiguous float32 array ``x`` of values in [-1, 1];
        temporaries of 1 + 4 + 1 bytes per value (table entry, midpoint, comparison)."""
        below = scratch(self.table.take(x.view(np.uint16)[_HIGH::2]))
        above = scratch(x > scratch(self.midpoints.take(below)))
        below += above
        return below


def _bucket_table(mid):
    """Midpoints below each bucket of float32 patterns that share their top 16 bits (uint8)."""
    top = np.arange(2 ** 16, dtype=np.uint32) << np.uint32(16)
    first, last = top.view(np.float32), (top | np.uint32(0xFFFF)).view(np.float32)
    low, high = np.fmin(first, last), np.fmax(first, last)  # negative patterns run backwards
    below = np.searchsorted(mid, low, side="left")
    inside = np.searchsorted(mid, high, side="right") - below  # midpoints in [low, high]
    if np.any((inside > 1) & ~np.isnan(low)):  # (NaN buckets never see a normalised value)
        raise ValueError("two midpoints of this map fall in one 16-bit bucket of float32 values: "
                         "neighbouring map values must be more than 1.6% of their size apart")
    return below.astype(np.uint8)


def codebook(qmap):
    """``qmap`` as a :class:`Codebook` (a plain map array gets its table built now)."""
    return qmap if isinstance(qmap, Codebook) else Codebook(qmap)


def quantize(x, qmap, block_size, codes=None, absmax=None, scratch=_uncounted):
    """Codes (uint8, x's size) and per-block absmax (float32) of ``x``; fills ``codes``/``absmax``
    in place when given, so state arrays keep their identity (and their ledger entry).

    ``qmap`` is a map array or a :class:`Codebook` (pass one to reuse its table across calls).
    Temporaries: the normalised values (4 bytes per element) and those of
    :meth:`Codebook.codes` (6 bytes per element); ``scratch`` counts them (an optimizer's
    ``scratch`` puts them in the ledger's workspace bucket).
    """
    xp = backend.array_module(x)
    book = codebook(qmap)
    blocks = _blocks(x.reshape(-1), block_size, xp)
    # max |x| from the two extremes: no |x| temporary the size of x
    scale = xp.maximum(blocks.max(axis=1), -blocks.min(axis=1)).astype(np.float32)
    normalised = scratch(blocks / xp.where(scale == 0, 1, scale)[:, None])
    found = book.codes(normalised.reshape(-1), scratch)
    del normalised
    found = found[:x.size]
    if codes is None:
        return found.reshape(x.shape), scale
    codes[...] = found.reshape(codes.shape)
    absmax[...] = scale
    return codes, absmax


def dequantize(codes, absmax, qmap, block_size, scratch=_uncounted):
    """float32 values of shape ``codes.shape`` from codes and per-block scales: the result,
    4 bytes per element, counted by ``scratch`` (a padded copy of it too when the size is not
    a whole number of blocks)."""
    xp = backend.array_module(codes)
    qmap = qmap.values if isinstance(qmap, Codebook) else qmap
    values = scratch(_blocks(qmap.take(codes.reshape(-1)), block_size, xp))
    values *= absmax[:, None]
    return values.reshape(-1)[:codes.size].reshape(codes.shape)
