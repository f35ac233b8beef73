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


def quantize(x, qmap, block_size, codes=None, absmax=None, scratch=_uncounted):
    """Codes (uint8, x's size) and per-block absmax (float32) of ``x``; fills ``codes``/``absmax``
    in place when given, so state arrays keep their identity (and their ledger entry).

    Temporaries: the normalised values (4 bytes per element) and the nearest-code indices
    (8 bytes per element, int64 from searchsorted); ``scratch`` counts them (an optimizer's
    ``scratch`` puts them in the ledger's workspace bucket).
    """
    xp = backend.array_module(x)
    blocks = _blocks(x.reshape(-1), block_size, xp)
    scale = xp.abs(blocks).max(axis=1).astype(np.float32)
    normalised = scratch(blocks / xp.where(scale == 0, 1, scale)[:, None])
    midpoints = (qmap[1:] + qmap[:-1]) / 2
    index = scratch(xp.searchsorted(midpoints, normalised.reshape(-1)))
    del normalised
    found = index[:x.size].astype(np.uint8)
    del index
    if codes is None:
        return found.reshape(x.shape), scale
    codes[...] = found.reshape(codes.shape)
    absmax[...] = scale
    return codes, absmax


def dequantize(codes, absmax, qmap, block_size, scratch=_uncounted):
    """float32 values of shape ``codes.shape`` from codes and per-block scales (one temporary
    of 4 bytes per element besides the result, counted by ``scratch``)."""
    xp = backend.array_module(codes)
    values = scratch(_blocks(qmap[codes.reshape(-1)], block_size, xp))
    return scratch((values * absmax[:, None]).reshape(-1)[:codes.size].reshape(codes.shape))
