"""The two half formats, float16 and bfloat16, as encoders to and decoders from float32.

bfloat16 is stored as uint16 bit patterns (NumPy has no bfloat16 dtype); float16 as NumPy's
float16. Each format also says which dtype the arithmetic runs in on a device: float32 on the
CPU (NumPy has no fast half matmul), float16 on CuPy for float16.
"""
import numpy as np

from .bfloat16 import bfloat16_bits_to_float32, float32_to_bfloat16_bits, round_to_bfloat16
from .float16 import float16_to_float32, float32_to_float16, round_to_float16


# Below this many values the float16 codec's dozen array passes cost more in fixed per-call
# overhead than NumPy's per-element conversion (about 3-5 ns a value): small float16 arrays go
# through astype on the CPU. Not on a GPU, whose hardware cast may not keep a NaN's payload as
# NumPy does; there the codec (exact on any device) serves every size. bfloat16 has no astype.
BIT_CODEC_MIN_SIZE = 16384


def _bit_codec(x):
    """Whether ``x`` (to encode or decode) goes through the float16 bit codec, not astype: when
    large, or when not a plain NumPy array (a device array)."""
    return x.size >= BIT_CODEC_MIN_SIZE or type(x) is not np.ndarray


class HalfFormat:
    """A 2-byte storage format: ``encode`` float32 -> storage, ``decode`` storage -> float."""

    def __init__(self, name, storage_dtype):
        self.name, self.storage_dtype = name, np.dtype(storage_dtype)

    def encode(self, x):
        """Round to the format, nearest even; overflow gives inf, as a GPU's conversion does."""
        if self.name == "bfloat16":
            return float32_to_bfloat16_bits(x)
        if x.dtype == np.float32 and _bit_codec(x):
            return float32_to_float16(x)
        with np.errstate(over="ignore", under="ignore"):  # overflow to inf is the point here
            return x.astype(np.float16)

    def decode(self, stored, dtype=np.float32):
        """The values as ``dtype``; a float16 array asked for as float16 is returned as is."""
        if self.name == "bfloat16":
            out = bfloat16_bits_to_float32(stored)
            return out if dtype == np.float32 else out.astype(dtype)
        if stored.dtype == dtype:
            return stored
        if dtype == np.float32 and _bit_codec(stored):
            return float16_to_float32(stored)
        return stored.astype(dtype)

    def round(self, x):
        """float32 ``x`` rounded to the format and kept float32: ``decode(encode(x))`` in fewer
        passes (what a gradient leaving a half module goes through)."""
        if x.dtype == np.float32:
            if self.name == "bfloat16":
                return round_to_bfloat16(x)
            if _bit_codec(x):
                return round_to_float16(x)
        return self.decode(self.encode(x), x.dtype)

    def compute_dtype(self, device):
        """float16 compute on a GPU for float16; float32 everywhere else (see the module doc)."""
        return np.dtype(np.float16) if (self.name == "float16" and device == "cuda") else np.dtype(np.float32)

    def __repr__(self):
        return self.name


FORMATS = {"float16": HalfFormat("float16", np.float16), "bfloat16": HalfFormat("bfloat16", np.uint16)}
_ALIASES = {"float16": "float16", "fp16": "float16", "half": "float16",
            "bfloat16": "bfloat16", "bf16": "bfloat16"}


def get_format(dtype):
    """The :class:`HalfFormat` for ``"float16"`` / ``"bfloat16"`` (aliases fp16, half, bf16)."""
    if isinstance(dtype, HalfFormat):
        return dtype
    name = _ALIASES.get(str(np.dtype(dtype)) if not isinstance(dtype, str) else dtype)
    if name is None:
        raise ValueError(f"unknown half-precision dtype {dtype!r}; choose 'float16' or 'bfloat16'")
    return FORMATS[name]


# -- parameters: upcast on use, gradient stored half ----------------------------------------------
