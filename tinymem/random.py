"""The seeded random number generator behind dropout and initialisation.

The state is two integers, ``(seed, counter)``, and every draw advances the counter, so saving
the state is copying two integers and restoring it replays exactly the same draws: what gradient
checkpointing needs to recompute a dropout mask bit for bit (PyTorch saves and restores its RNG
state for the same reason).

- On the CPU a draw builds NumPy's generator from ``SeedSequence([seed, counter])`` (about 10 us).
- On a device no generator is built: a generator there (cuRAND's XORWOW) sets up a state per
  thread, 270K states and an init kernel on an H200, for every dropout call. Instead each value
  is a pure function of (seed, counter, its index): Philox4x32-10 (Salmon et al., 2011, the
  counter-based generator of cuRAND and PyTorch's CUDA RNG), keyed by two 32-bit words of the
  seed and counting (index, draw), in ONE fused kernel per draw (``tinymem.fused``). Each
  counter gives four 32-bit words, so four values: uniform ones are a word's top 24 bits times
  2^-24, normal ones Box-Muller of two words (a cosine and a sine). A draw of n values makes a
  buffer of 4·ceil(n / 4) float32 (up to 12 bytes more than n values).

The same seed gives reproducible, but not identical, numbers on the two devices.

Memory cost: none beyond the arrays drawn.
"""
import operator
import threading

import numpy as np

from . import backend
from .fused import Kernel

_PHILOX_M, _PHILOX_W = (0xD2511F53, 0xCD9E8D57), (0x9E3779B9, 0xBB67AE85)
_LOW32, _TWO_PI = 0xFFFFFFFF, np.float32(2 * np.pi)


def _philox(ops, key0, key1, draw0, draw1):
    """The four 32-bit words of Philox4x32-10 for counter (index, draw) and key (key0, key1)."""
    i = ops.cast(ops.index(), np.uint64)
    c = [ops.cast(i & _LOW32, np.uint32), ops.cast(i >> 32, np.uint32), draw0, draw1]
    k0, k1 = ops.cast(key0, np.uint32), ops.cast(key1, np.uint32)
    for _ in range(10):
        p0 = ops.cast(c[0], np.uint64) * _PHILOX_M[0]
        p1 = ops.cast(c[2], np.uint64) * _PHILOX_M[1]
        hi0, lo0 = ops.cast(p0 >> 32, np.uint32), ops.cast(p0 & _LOW32, np.uint32)
        hi1, lo1 = ops.cast(p1 >> 32, np.uint32), ops.cast(p1 & _LOW32, np.uint32)
        c = [hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0]
        k0, k1 = k0 + _PHILOX_W[0], k1 + _PHILOX_W[1]
    return c


def _unit(ops, word, offset):
    """A float32 in [offset * 2^-24, 1 + (offset - 1) * 2^-24] from the top 24 bits of ``word``."""
    return ops.cast((word >> 8) + offset, np.float32) * np.float32(2.0 ** -24)


def _uniform_body(ops, key0, key1, draw0, draw1, *out):
    return tuple(_unit(ops, word, 0) for word in _philox(ops, key0, key1, draw0, draw1))


def _normal_body(ops, key0, key1, draw0, draw1, *out):
    words, normals = _philox(ops, key0, key1, draw0, draw1), ()
    for first, second in (words[:2], words[2:]):  # Box-Muller: two normals from two words
        radius = ops.sqrt(np.float32(-2.0) * ops.log(_unit(ops, first, 1)))  # (0, 1]: log is finite
        angle = _TWO_PI * _unit(ops, second, 0)
        normals += (radius * ops.cos(angle), radius * ops.sin(angle))
    return normals


_KEY, _OUT = "uint32 key0, uint32 key1, uint32 draw0, uint32 draw1", "float32 v0, float32 v1, float32 v2, float32 v3"
UNIFORM = Kernel("philox_uniform", _KEY, _OUT, _uniform_body, ("key0", "key1", "draw0", "draw1"))
NORMAL = Kernel("philox_normal", _KEY, _OUT, _normal_body, ("key0", "key1", "draw0", "draw1"))

_state = {"seed": 0, "counter": 0}
# Reading the counter and advancing it are two steps: two threads drawing at once could read the
# same count and draw the same numbers. The lock makes a draw's count its own (PyTorch locks its
# generator too); it also keeps (seed, counter) consistent for get_rng_state and set_rng_state.
_lock = threading.Lock()


def _take_draw():
    """``(seed, counter)`` for one draw, advancing the counter under the lock."""
    with _lock:
        draw = _state["counter"]
        _state["counter"] = draw + 1
        return _state["seed"], draw


def manual_seed(seed):
    """Seed every draw that follows (PyTorch's ``torch.manual_seed``): an integer in
    [-2^63, 2^64), a negative one taken modulo 2^64 as PyTorch does."""
    try:
        seed = operator.index(seed)  # 1.5 or "3" would be truncated or parsed: refused
    except TypeError:
        raise TypeError(f"manual_seed takes an integer, got {type(seed).__name__} {seed!r}") from None
    if not -2 ** 63 <= seed < 2 ** 64:
        raise ValueError(f"manual_seed: the seed must be in [-2**63, 2**64), got {seed}")
    with _lock:
        _state["seed"], _state["counter"] = seed % 2 ** 64, 0


def get_rng_state():
    """The generator state as a small int64 array ``[seed, counter]`` (a seed of 2^63 and up
    reads as its int64 bits)."""
    with _lock:
        state = [_state["seed"], _state["counter"]]
    return np.array(state, dtype=np.uint64).view(np.int64)


def set_rng_state(state):
    """Restore a state returned by :func:`get_rng_state`: ``[seed, counter]``, a seed in
    [-2^63, 2^64) as :func:`manual_seed` takes it and a count of draws in [0, 2^63), which
    :func:`get_rng_state` returns as an int64. Checked before anything is set."""
    values = np.asarray(state).reshape(-1)
    if values.size != 2 or values.dtype.kind not in "iu":
        raise ValueError(f"set_rng_state takes the 2 integers [seed, counter] of get_rng_state, got {state!r}")
    seed, counter = (int(v) for v in values)
    if not 0 <= counter < 2 ** 63:  # -1 was taken, then the next draw and get_rng_state raised
        raise ValueError(f"set_rng_state: the counter (the second value, the draws made since the seed) must be in "
                         f"[0, 2**63), got {counter}; pass a state that get_rng_state returned")
    with _lock:
        _state["seed"], _state["counter"] = seed % 2 ** 64, counter


def _next_seed():
    return np.random.SeedSequence(list(_take_draw()))


def generator(device="cpu"):
    """NumPy's generator for one draw on the CPU; it consumes one step of the state."""
    if backend.check_device(device) != "cpu":
        raise ValueError("random.generator makes CPU generators only: a device draws with rand/randn "
                         "(a counter-based kernel, no generator)")
    return np.random.default_rng(_next_seed())


def _device_draw(kernel, shape, device):
    """One draw on a device: ``kernel`` keyed by the seed, counting this draw; no generator."""
    xp = backend.array_module(backend.check_device(device))
    seed, draw = _take_draw()
    key = np.random.SeedSequence([seed]).generate_state(2, np.uint32)
    size = int(np.prod(shape, dtype=np.int64))
    words = xp.empty((-(-size // 4), 4), np.float32)  # each counter gives 4 values
    kernel(key[0], key[1], np.uint32(draw & 0xFFFFFFFF), np.uint32(draw >> 32 & 0xFFFFFFFF), *words.T)
    return words.reshape(-1)[:size].reshape(shape)


def _checked(shape):
    """``shape`` as a tuple, refused before a draw takes a step of the state."""
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    if any(operator.index(n) < 0 for n in shape):
        raise ValueError(f"negative dimensions are not allowed: shape {shape}")
    return shape


def rand(shape, device=None, dtype=np.float32):
    """Uniform [0, 1) numbers, as a raw array."""
    shape = _checked(shape)
    if backend.check_device(device) != "cpu":
        return _device_draw(UNIFORM, shape, device).astype(dtype, copy=False)
    return generator().random(shape, dtype=np.float32).astype(dtype, copy=False)


def randn(shape, device=None, dtype=np.float32):
    """Standard normal numbers, as a raw array."""
    shape = _checked(shape)
    if backend.check_device(device) != "cpu":
        return _device_draw(NORMAL, shape, device).astype(dtype, copy=False)
    return generator().standard_normal(shape, dtype=np.float32).astype(dtype, copy=False)


def uniform(low, high, shape, device=None, dtype=np.float32):
    return (low + (high - low) * rand(shape, device, np.float64)).astype(dtype)
