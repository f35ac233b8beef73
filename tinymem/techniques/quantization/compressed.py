"""Training with compressed saved activations (the ActNN idea, Chen et al. 2021).

Inside ``with compress_saved_activations(bits=8):`` every floating-point tensor an op saves for
backward is stored as ``bits``-bit codes per group of ``group_size`` consecutive elements, with
the group's minimum and step (two float32 numbers) beside it:

    code = round_or_stochastic((x - min) / step),  step = (max - min) / (2**bits - 1)
    x'   = min + step · code                                      (in backward)

Memory per saved element: bits/8 bytes of codes + 12/group_size bytes of (min, start, step),
plus 12 bytes per NaN or inf, which is kept exactly (its group is quantized over its finite values).
With the default group of 256: 8 bits -> 1.047 bytes (0.262x of float32), 4 bits -> 0.547
(0.137x), 2 bits -> 0.297 (0.074x). 4 and 2-bit codes are packed 2 and 4 to a byte. The ledger counts
exactly these bytes in ``activation`` (registered with ``memory.register_bytes``) and releases
them when backward has used them. Parameters (a Linear saves its weight) and integer or
boolean tensors (targets, dropout masks) are kept as they are: compressing a weight would only
add a copy.

The gradient becomes approximate. Rounding to nearest (the default at 8 bits) is biased per
element; at 4 and 2 bits the default is stochastic rounding, code = floor(v + u) with u ~ U[0,1)
from :mod:`tinymem.random`, whose expectation is exactly v: the gradient is then an unbiased
estimate of the one computed from the compressed activations' grid (ActNN's argument for why
SGD still converges). Same seed, same noise: restoring the RNG state replays it.

Pitfall: the ReLU reads its mask from its saved output, so a small positive value rounded to 0
would block its gradient: 0.2 % of flipped mask bits at 8 bits cost 10 % of gradient norm in a
3-layer MLP. ``keep_sign`` (on by default) keeps code 0 for the group's exact minimum and
quantizes only the values above it, so after a ReLU every zero stays zero and every positive
stays positive.
A tensor saved twice (ReLU's output is also the next Linear's input) is compressed once.
"""
import weakref

import numpy as np

from ... import backend, memory, random
from ...autograd import saved_tensors_hooks

BITS = (8, 4, 2)


class CompressedTensor:
    """Packed uint8 codes, per-group float32 ``starts`` and ``steps`` (and ``mins`` with
    ``keep_sign``), the shape and dtype to rebuild, and the non-finite values kept exactly
    (``special_index``, ``special_value``: ``None`` when there are none)."""

    def __init__(self, codes, starts, steps, mins, shape, dtype, bits, special=(None, None)):
        self.codes, self.starts, self.steps, self.mins = codes, starts, steps, mins
        self.shape, self.dtype, self.bits = shape, dtype, bits
        self.special_index, self.special_value = special

    @property
    def nbytes(self):
        return sum(a.nbytes for a in (self.codes, self.starts, self.steps, self.mins,
                                      self.special_index, self.special_value) if a is not None)


def compress(x, bits=8, group_size=256, stochastic=False, keep_sign=True):
    """Quantize array ``x`` to ``bits`` per element in groups; returns a :class:`CompressedTensor`.

    Plain (``keep_sign=False``): 2**bits levels spread evenly over each group's [min, max];
    8 bytes of (start, step) per group. ``keep_sign``: code 0 is reserved for the group's
    minimum *exactly*, and the other 2**bits - 1 codes spread over [smallest value above the
    minimum, max]; 12 bytes per group. After a ReLU the minimum is 0, so zeros stay zero and
    positives stay positive (the ReLU's mask survives exactly) while the positives keep an
    unbiased stochastic rounding.
    """
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits}")
    per_byte = 8 // bits
    if group_size < 1 or group_size % per_byte:
        raise ValueError(f"group_size must be a positive multiple of {per_byte} for {bits}-bit codes")
    xp = backend.array_module(x)
    # The temporaries are registered as workspace while they live (a float32 copy of x, made the
    # codes' values in place, and a few masks and per-group arrays): the ledger then sees what
    # compressing costs for a moment beside the tensor being compressed.
    flat = memory.register(x.reshape(-1).astype(np.float32))  # astype copies: ours to overwrite
    pad = -flat.size % group_size
    if pad:
        fill = flat[-1:] if flat.size else xp.zeros(1, np.float32)
        flat = memory.register(xp.concatenate([flat, xp.broadcast_to(fill, (pad,))]))
    groups = flat.reshape(-1, group_size)
    special = (None, None)
    finite = memory.register(xp.isfinite(groups))
    if not bool(finite.all()):
        # An inf would make its group's step inf and every code of the group 0 or NaN. Its
        # group is quantized over its finite values, and each NaN/inf is kept aside exactly
        # (12 bytes each), so backward sees it and a GradScaler can skip the step.
        where = xp.nonzero(~finite.reshape(-1)[:x.size])[0]
        special = (where.astype(np.int64), flat[where].astype(x.dtype))
        lows = xp.where(finite, groups, np.float32(np.inf)).min(axis=1, keepdims=True)
        lows = xp.where(xp.isfinite(lows), lows, np.float32(0))
        groups = memory.register(xp.where(finite, groups, lows))
    mins = groups.min(axis=1, keepdims=True)
    top = groups.max(axis=1, keepdims=True)
    levels = 2 ** bits - 1
    if keep_sign:
        above = memory.register(groups > mins)
        low = memory.register(xp.where(above, groups, top)).min(axis=1, keepdims=True)
        steps = (top - low) / np.float32(levels - 1)
        steps = xp.where(steps > 0, steps, np.float32(1.0)).astype(np.float32)
        starts = (low - steps).astype(np.float32)  # code 1 decodes to ``low``
    else:
        steps = (top - mins) / np.float32(levels)
        steps = xp.where(steps > 0, steps, np.float32(1.0)).astype(np.float32)
        starts = mins
    v = groups  # x's float32 copy becomes the codes' values, in place (same operations as
    v -= starts  # (groups - starts) / steps, without two more arrays of x's size)
    v /= steps
    if stochastic:
        v += memory.register(random.rand(v.shape, backend.device_of(v)))
        xp.floor(v, out=v)
    else:
        xp.rint(v, out=v)
    if keep_sign:
        xp.clip(v, 1, levels, out=v)
        v *= above  # 0 where x is its group's minimum
    codes = xp.clip(v, 0, levels, out=v).astype(np.uint8).reshape(-1, per_byte)
    if per_byte > 1:
        memory.register(codes)  # one byte per value until packed
        shifts = (xp.arange(per_byte, dtype=np.uint8) * bits).astype(np.uint8)
        codes <<= shifts
        # The codes occupy disjoint bits, so their sum is their bitwise or (CuPy has no or.reduce);
        # it fits a byte, so it is summed in one (NumPy would widen it to 8 bytes per packed byte).
        codes = codes.sum(axis=1, dtype=np.uint8)
    return CompressedTensor(codes.reshape(-1), starts.reshape(-1), steps.reshape(-1),
                            mins.reshape(-1) if keep_sign else None, x.shape, x.dtype, bits, special)


def decompress(c):
    """The float array a :class:`CompressedTensor` stands for (its original shape and dtype)."""
    xp = backend.array_module(c.codes)
    per_byte = 8 // c.bits
    codes = c.codes
    if per_byte > 1:
        shifts = (xp.arange(per_byte, dtype=np.uint8) * c.bits).astype(np.uint8)
        codes = memory.register(codes[:, None] >> shifts)  # one byte per value while decoding
        codes &= np.uint8(2 ** c.bits - 1)
    codes = codes.reshape(c.steps.size, -1)
    # One float32 array of the tensor's size, counted as workspace, computed in place (the same
    # operations as codes * steps + starts), and returned itself when the dtype is float32.
    groups = memory.register(codes.astype(np.float32))
    groups *= c.steps[:, None]
    groups += c.starts[:, None]
    if c.mins is not None:
        minimum = memory.register(codes == 0)  # one byte per value
        xp.copyto(groups, xp.broadcast_to(c.mins[:, None], groups.shape), where=minimum)
    n = int(np.prod(c.shape))
    out = groups.reshape(-1)[:n]
    if out.dtype != c.dtype:
        out = out.astype(c.dtype)
    if c.special_index is not None:
        out[c.special_index] = c.special_value
    return out.reshape(c.shape)


def _view_key(array):
    """Which elements of which buffer ``array`` shows. Keyed by the owner alone, the q, k and v
    views of one projection output would all be stored as the first of them."""
    interface = getattr(array, "__cuda_array_interface__", None) or array.__array_interface__
    return id(memory.owner_of(array)), interface["data"][0], array.shape, array.strides


def _is_parameter(array):
    where = memory.locate(array)
    return where is not None and where[0] == "parameter"


class compress_saved_activations(saved_tensors_hooks):
    """``with compress_saved_activations(bits=8):`` store saved float tensors as ``bits``-bit codes.

    ``group_size`` consecutive elements share a (min, step) pair; ``stochastic`` (default: True
    below 8 bits) rounds stochastically with :mod:`tinymem.random`; ``keep_sign`` keeps ReLU
    masks exact (see :func:`compress`). See the module docstring
    for the bytes per element and the pitfalls. ``stats`` counts tensors and bytes packed.
    """

    def __init__(self, bits=8, group_size=256, stochastic=None, keep_sign=True):
        if bits not in BITS:
            raise ValueError(f"bits must be one of {BITS} (use no context for 32-bit), got {bits}")
        self.bits, self.group_size, self.keep_sign = bits, group_size, keep_sign
        self.stochastic = bits < 8 if stochastic is None else bool(stochastic)
        self.stats = {"tensors": 0, "original_bytes": 0, "compressed_bytes": 0}
        self._seen = {}
        super().__init__(self._pack, self._unpack)

    def _pack(self, t):
        array = t.data
        # A Python number (``loss * 0.5`` saves the 0.5) has nothing to compress.
        if not hasattr(array, "dtype") or array.dtype.kind != "f" or _is_parameter(array):
            return t
        key = _view_key(array)
        hit = self._seen.get(key)
        if hit is not None and hit[0]() is memory.owner_of(array) and hit[1]() is not None:
            return hit[1]()
        packed = compress(array, self.bits, self.group_size, self.stochastic, self.keep_sign)
        memory.register_bytes(packed, packed.nbytes, "activation", "device", label=f"int{self.bits} saved")
        self._seen[key] = (weakref.ref(memory.owner_of(array)), weakref.ref(packed))
        self.stats["tensors"] += 1
        self.stats["original_bytes"] += array.nbytes
        self.stats["compressed_bytes"] += packed.nbytes
        return packed

    @staticmethod
    def _unpack(packed):
        if not isinstance(packed, CompressedTensor):
            return packed
        # The float decode is a temporary of backward: the ledger counts it as workspace.
        return memory.register(decompress(packed))

    def __exit__(self, *exc):
        self._seen.clear()
        return super().__exit__(*exc)
