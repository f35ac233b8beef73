"""The seeded random number generator behind dropout and initialisation.

The state is two integers, ``(seed, counter)``. Every draw builds a fresh generator from
``SeedSequence([seed, counter])`` and advances the counter, so saving the state is copying two
integers and restoring it replays exactly the same draws: what gradient checkpointing needs to
recompute a dropout mask bit for bit (PyTorch saves and restores its RNG state for the same
reason). NumPy and CuPy draws use their own generators: the same seed gives reproducible, but
not identical, numbers on the two devices.

Memory cost: none beyond the arrays drawn.
"""
import numpy as np

from . import backend

_state = {"seed": 0, "counter": 0}


def manual_seed(seed):
    """Seed every draw that follows (PyTorch's ``torch.manual_seed``)."""
    _state["seed"], _state["counter"] = int(seed), 0


def get_rng_state():
    """The generator state as a small int64 array ``[seed, counter]``."""
    return np.array([_state["seed"], _state["counter"]], dtype=np.int64)


def set_rng_state(state):
    """Restore a state returned by :func:`get_rng_state`."""
    seed, counter = (int(v) for v in np.asarray(state).reshape(-1))
    _state["seed"], _state["counter"] = seed, counter


def _next_seed():
    seq = np.random.SeedSequence([_state["seed"], _state["counter"]])
    _state["counter"] += 1
    return seq


def generator(device=None):
    """A generator for one draw on ``device`` (the default device when None); it consumes one
    step of the state."""
    seq = _next_seed()
    if backend.check_device(device) == "cpu":
        return np.random.default_rng(seq)
    cupy = backend.get_cupy()
    return cupy.random.default_rng(int(seq.generate_state(1, np.uint64)[0]))


def rand(shape, device=None, dtype=np.float32):
    """Uniform [0, 1) numbers, as a raw array."""
    return generator(device).random(shape, dtype=np.float32).astype(dtype, copy=False)


def randn(shape, device=None, dtype=np.float32):
    """Standard normal numbers, as a raw array."""
    return generator(device).standard_normal(shape, dtype=np.float32).astype(dtype, copy=False)


def uniform(low, high, shape, device=None, dtype=np.float32):
    return (low + (high - low) * rand(shape, device, np.float64)).astype(dtype)
