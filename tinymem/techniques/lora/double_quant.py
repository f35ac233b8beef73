"""Double quantization (Dettmers et al. 2023): the NF4 block scales, quantized to 8 bits.

NF4 keeps one float32 absmax per 64 weights: 32/64 = 0.5 bits per weight, an eighth of the
4-bit codes' own size. Double quantization stores those scales again block-wise:

    c = absmax - mean(absmax)                    one float32 mean per weight tensor
    codes8, scale2 = blockwise 8-bit (c)         blocks of 256 scales, one float32 scale each

with the signed dynamic 8-bit map of the 8-bit optimizers (``optim/blockwise.py``), as
bitsandbytes does. Subtracting the mean centres the scales, which are all positive, so the
signed map's codes are all in use. Bits per weight, codes + scales:

    4 + 8/64 + 32/(64·256) = 4.127     (against 4 + 32/64 = 4.5 without it)

The mean is taken over the finite scales only: an inf or NaN scale (quantize_nf4 refuses the
weights that would make one, but this function takes any scales) then spoils its own block of
256, not, through the mean, every scale of the tensor.

The reconstructed scale is off by at most half the map's largest gap times the block's largest
|c| (the map's own error bound), so every weight of a block moves by at most that much.
"""
import numpy as np

from ... import backend
from ...optim.blockwise import codebook, dequantize, dynamic_map, quantize

BLOCK2 = 256  # scales per second-level scale

_MAPS = {}


def _map(xp):
    if xp.__name__ not in _MAPS:
        _MAPS[xp.__name__] = codebook(xp.asarray(dynamic_map(signed=True)))
    return _MAPS[xp.__name__]


def quantize_absmax(absmax, block=BLOCK2):
    """``(codes8, scale2, mean)``: uint8 per scale, float32 per ``block`` scales, and the float32
    mean as a 1-element array (kept on the scales' device), the mean of the finite scales.
    Temporaries: one byte per scale (the finiteness mask)."""
    xp = backend.array_module(absmax)
    if absmax.size == 0:  # the mean of no scales is NaN: every scale would come back NaN
        raise ValueError("quantize_absmax: no scales to quantize (an empty array); pass the absmax that "
                         "quantize_nf4 returned for a weight with at least one value")
    finite = xp.isfinite(absmax)
    if bool(finite.all()):
        mean = absmax.mean(keepdims=True).astype(np.float32)
    else:
        count = max(int(finite.sum()), 1)
        mean = (xp.where(finite, absmax, 0).sum(keepdims=True) / count).astype(np.float32)
    codes, scale2 = quantize(absmax - mean, _map(xp), block)
    return codes, scale2, mean


def dequantize_absmax(codes, scale2, mean, block=BLOCK2):
    """The float32 block scales back: ``map[codes8] · scale2 + mean`` (4 bytes per scale)."""
    values = dequantize(codes, scale2, _map(backend.array_module(codes)), block)
    values += mean
    return values
