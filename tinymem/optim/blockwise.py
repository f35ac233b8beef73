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
import contextlib
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


def _by_block(x, block_size, op, per_block, out):
    """``out = op(x, scale of x's block)`` for a flat ``x`` cut into blocks (a short last block
    keeps its own scale), without copying ``x`` into whole padded blocks."""
    whole = x.size - x.size % block_size
    rows = whole // block_size
    op(x[:whole].reshape(rows, block_size), per_block[:rows, None], out=out[:whole].reshape(rows, block_size))
    if whole < x.size:
        op(x[whole:], per_block[rows], out=out[whole:])
    return out


@contextlib.contextmanager
def block_buffers(xp, block_size):
    """A context in which NumPy's ufuncs buffer at most one block of elements.

    A scale broadcast along its block (``x / A`` in :func:`quantize`, ``map[code] * A`` in
    :func:`dequantize`) changes stride every block; when blocks are shorter than NumPy's
    8192-element buffers, the ufunc copies its operands through buffers, and the product costs
    2.5x a plain one (21 against 8 us for 65,536 float32 at block 2048). With buffers no longer
    than a block, each block is one strided run and nothing is copied. Setting the size costs
    microseconds: enter once around a loop of chunks. CuPy has no such buffers: no effect."""
    if xp is not np:
        yield
        return
    with np.errstate():  # restores the buffer size on exit
        np.setbufsize(max(16, block_size - block_size % 16))  # NumPy takes multiples of 16
        yield


def _absmax(x, block_size, out, signed=True):
    """max |x| of each block of a flat ``x``, from the two extremes (no |x| temporary); the
    maximum alone when ``x`` is known to have no negative value (``signed=False``)."""
    xp = backend.array_module(x)
    whole = x.size - x.size % block_size
    rows, tail = x[:whole].reshape(-1, block_size), x[whole:]
    if signed:
        xp.maximum(rows.max(axis=1), -rows.min(axis=1), out=out[:rows.shape[0]])
    else:
        rows.max(axis=1, out=out[:rows.shape[0]])
    if tail.size:
        out[rows.shape[0]:] = xp.maximum(tail.max(), -tail.min()) if signed else tail.max()
    return out


def _uncounted(array):
    return array


def _key(x):
    """The float32 bit pattern of ``x`` as int32, made absolute: x's own pattern for x >= 0, and
    for x < 0 (pattern -2**31 + p, p that of |x|) 2**31 - p, which falls as |x| grows. Keys of
    one sign rise with x, and for |x| < 2 they are >= 0 with their top 16 bits < 2**15, except
    -0.0's: -2**31 is its own absolute value (see :meth:`Codebook.codes`)."""
    return np.abs(np.asarray(x, np.float32).view(np.int32))


class Codebook:
    """A quantization map and the table that finds each value's nearest code in one lookup.

    The nearest code of x is the number of midpoints (between neighbouring map values) below x:
    what a binary search over the midpoints finds, 8 data-dependent steps per value. Instead,
    take x's *key* (:func:`_key`), the absolute value of its float32 pattern read as an int32
    (keys of one sign then rise with x, in one pass; a map without negative values, ``signed``
    False, takes x in [0, 1] and skips it). The key's top 16 bits pick a bucket of floats narrow
    enough (2^-7 of their size) to hold at most one midpoint, and for |x| < 2 the bucket is below
    2**15. Its entry holds the number of midpoints below the bucket in its top 16 bits and
    ``0xFFFF - low16(key(midpoint inside))`` in its low 16 (0 when none is inside), so adding
    x's low 16 key bits carries one into the top bits exactly when x is above that midpoint::

        code = (entries[key >> 16] + low16(key)) >> 16      # uint32 arithmetic

    Each entry is stored minus its own bucket's bits (``bucket << 16``, modulo 2**32), so the
    whole key is added instead of its low 16 bits: one pass fewer. -0.0 has key -2**31 and
    bucket -2**15, which ``take`` wraps to bucket 0, that of +0.0; the key's extra 2**31 only
    adds 2**15 above the 8 bits of the code. One gather from a 128 KiB table and four
    elementwise passes (two unsigned), against a search 15x slower. Building checks every
    bucket (the dynamic map's closest midpoints are 1.4% apart), and the codes equal the
    search's bit for bit: a test holds them on every midpoint, its float32 neighbours, the map's
    values, signed zeros and a million random values.
    Memory: the map (256 float32) and the table (2**15 uint32, 128 KiB), once per map.
    """

    def __init__(self, values):
        xp = backend.array_module(values)
        self.values = values
        self.signed = bool(backend.to_numpy(values).min() < 0)
        mid = backend.to_numpy((values[1:] + values[:-1]) / 2).astype(np.float32)  # as a search sees them
        self.entries = xp.asarray(_entry_table(mid + np.float32(0)))  # + 0: a midpoint -0.0 becomes +0.0

    @property
    def nbytes(self):
        return self.values.nbytes + self.entries.nbytes

    def codes(self, x, out=None, work=None):
        """Nearest-code indices (uint8) of a contiguous float32 array ``x`` of values in [-1, 1]
        ([0, 1] for an unsigned map), into ``out`` when given. ``work``: the key (int32), bucket
        (intp) and entry (uint32) arrays of x's size, 16 bytes per value (allocated when absent);
        the key may be ``x.view(np.int32)``, x's own memory."""
        xp = backend.array_module(x)
        if work is None:
            values, bucket, entry = workspace(x.size, xp)
            work = (values.view(np.int32), bucket, entry)
        key, bucket, entry = work
        out = xp.empty(x.shape, np.uint8) if out is None else out
        bits = x.view(np.int32)
        if self.signed:
            xp.abs(bits, out=key)  # see _key
        else:
            key = bits
        xp.right_shift(key, 16, out=bucket)
        backend.take(self.entries, bucket, entry)
        entry += key.view(np.uint32)
        return xp.right_shift(entry, 16, out=out, casting="unsafe")


def _entry_table(mid):
    """The 2**15 uint32 entries of :class:`Codebook` for the sorted float32 midpoints ``mid``."""
    bucket = np.arange(2 ** 15, dtype=np.uint32)
    lowest = bucket << np.uint32(16)  # the smallest key of a bucket is its lowest float, either sign
    # keys of 2**30 and above are negative floats, whose pattern is -key (modulo 2**32)
    lowest = np.where(lowest & np.uint32(0x40000000), -lowest, lowest).astype(np.uint32).view(np.float32)
    below = np.searchsorted(mid, lowest, side="left").astype(np.uint32)
    key = _key(mid).view(np.uint32)
    home = key >> np.uint32(16)
    if np.unique(home).size < home.size:
        raise ValueError("two midpoints of this map fall in one 16-bit bucket of float32 values: "
                         "neighbouring map values must be more than 1.6% of their size apart")
    room = np.zeros(2 ** 15, np.uint32)
    room[home] = np.uint32(0xFFFF) - (key & np.uint32(0xFFFF))
    return (below << np.uint32(16)) + room - (bucket << np.uint32(16))  # wraps modulo 2**32


def codebook(qmap):
    """``qmap`` as a :class:`Codebook` (a plain map array gets its table built now)."""
    return qmap if isinstance(qmap, Codebook) else Codebook(qmap)


def workspace(size, xp, scratch=_uncounted):
    """The temporaries of quantizing ``size`` values, 16 bytes per value: normalised values
    (float32, then their keys in place), buckets (intp) and table entries (uint32). A caller
    that quantizes chunk after chunk makes them once; ``scratch`` counts them. The buckets
    also serve :func:`dequantize` as ``index``."""
    return tuple(scratch(xp.empty(size, dtype)) for dtype in (np.float32, np.intp, np.uint32))


_TINY = np.float32(np.finfo(np.float32).smallest_subnormal)


def quantize(x, qmap, block_size, codes=None, absmax=None, scratch=_uncounted, work=None, check=True):
    """Codes (uint8, x's size) and per-block absmax (float32) of a float32 ``x``; fills
    ``codes``/``absmax`` (contiguous) in place when given, so state arrays keep their identity
    (and their ledger entry).

    ``qmap`` is a map array or a :class:`Codebook` (pass one to reuse its table across calls);
    an unsigned map (no negative value, for Adam's second moment) takes an ``x`` >= 0 only.
    Temporaries: 16 bytes per element (see :func:`workspace`), in ``work`` when given (arrays
    of at least x's size; the normalised values may be ``x`` itself, divided in place), else
    allocated and counted by ``scratch`` (an optimizer's ``scratch`` puts them in the ledger's
    workspace bucket). ``check=False`` skips the pass that refuses negative values for an
    unsigned map (Adam8bit's v, a mean of squares, cannot have any).
    """
    xp = backend.array_module(x)
    book = codebook(qmap)
    flat = x.reshape(-1)
    if check and not book.signed and flat.size and float(flat.min()) < 0:
        # The unsigned path skips the sign handling: a negative value would get a wrong code.
        raise ValueError("quantize: this map has no negative values (an unsigned map) but x has some; "
                         "use a signed map, e.g. dynamic_map(signed=True)")
    normalised, bucket, entry = (part[:flat.size] for part in (work or workspace(flat.size, xp, scratch)))
    scale = xp.empty(num_blocks(flat.size, block_size), np.float32) if absmax is None else absmax
    _absmax(flat, block_size, scale, book.signed)
    # A block of zeros divides by the smallest float32 instead of by 0 (0 / tiny = 0), and any
    # other absmax is at least that: one small ufunc where ``where(scale == 0, 1, scale)`` is two.
    _by_block(flat, block_size, xp.divide, xp.maximum(scale, _TINY), normalised)
    keys = (normalised.view(np.int32), bucket, entry)  # keys replace the normalised values
    found = book.codes(normalised, None if codes is None else codes.reshape(-1), keys)
    return (found.reshape(x.shape) if codes is None else codes), scale


def dequantize(codes, absmax, qmap, block_size, scratch=_uncounted, out=None, index=None):
    """float32 values of shape ``codes.shape`` from codes and per-block scales, into the flat
    float32 ``out`` when given: the result, 4 bytes per element, counted by ``scratch``.
    ``index``: an intp array of the codes' size to convert them into first. ``take`` gathers
    with intp indices only; given uint8 codes NumPy converts them into an array of its own,
    8 bytes per element that no ledger sees."""
    xp = backend.array_module(codes)
    qmap = qmap.values if isinstance(qmap, Codebook) else qmap
    flat = codes.reshape(-1)
    out = scratch(xp.empty(flat.shape, np.float32)) if out is None else out
    if index is not None:
        xp.copyto(index, flat)
        flat = index
    backend.take(qmap, flat, out)
    return _by_block(out, block_size, xp.multiply, absmax, out).reshape(codes.shape)
