"""bfloat16 by hand against PyTorch's float32 -> bfloat16 conversion, bit for bit."""
import numpy as np
import pytest
from conftest import requires_torch

from tinymem import backend
from tinymem.techniques.precision.bfloat16 import (BFLOAT16_NAN, bfloat16_bits_to_float32,
                                         float32_to_bfloat16_bits, round_to_bfloat16)

F32_MAX = np.finfo(np.float32).max
EDGES = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, 65504.0, -65504.0, F32_MAX, -F32_MAX,
                  np.finfo(np.float32).tiny, np.finfo(np.float32).smallest_subnormal,
                  -np.finfo(np.float32).smallest_subnormal, 1e-40, -3e-39, 5.96e-8, 6.1e-5,
                  1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8, 1.0 + 2.0 ** -8 + 2.0 ** -20,  # ties and near-ties
                  3.3895314e38, 3.3961776e38], np.float32)


def _torch_bits(x):
    import torch
    return torch.from_numpy(x).to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16)


def _random_float32(n, seed=0):
    """Uniformly random bit patterns: every exponent, subnormals, inf and NaN included."""
    return np.random.default_rng(seed).integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)


@requires_torch
@pytest.mark.parametrize("values", ["random", "edges"])
def test_bits_match_torch(values):
    x = _random_float32(10**6) if values == "random" else EDGES
    ours, theirs = float32_to_bfloat16_bits(x), _torch_bits(x)
    nan = np.isnan(x)
    assert np.array_equal(ours[~nan], theirs[~nan]), np.flatnonzero(ours[~nan] != theirs[~nan])[:10]
    # NaN payloads differ between PyTorch's own code paths (0x7FC0 scalar, 0xFFFF vectorized);
    # what must hold is that NaN stays NaN.
    assert np.isnan(bfloat16_bits_to_float32(ours[nan])).all()
    if values == "random":
        assert nan.sum() > 1000 and (np.abs(x) < np.finfo(np.float32).tiny).sum() > 1000


@requires_torch
def test_back_to_float32_matches_torch():
    import torch
    bits = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    ours = bfloat16_bits_to_float32(bits)
    theirs = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))


def test_edge_cases_by_hand(device):
    xp = backend.array_module(device)
    x = xp.asarray(np.array([np.nan, np.inf, -np.inf, -0.0, F32_MAX, 65504.0, 1e-40], np.float32))
    bits = backend.to_numpy(float32_to_bfloat16_bits(x))
    assert bits[0] == BFLOAT16_NAN
    assert bits[1] == 0x7F80 and bits[2] == 0xFF80  # inf stays inf
    assert bits[3] == 0x8000  # -0.0 keeps its sign
    assert bits[4] == 0x7F80  # float32's max rounds up to inf, as in PyTorch
    assert bfloat16_bits_to_float32(xp.asarray(bits[5:6])).item() == 65536.0  # 65504 needs 11 bits
    assert bits[6] != 0 and (bits[6] >> 7) & 0xFF == 0  # a subnormal stays a subnormal


def test_round_trip_is_exact_for_bfloat16_values(device):
    xp = backend.array_module(device)
    bits = xp.arange(2**16, dtype=xp.uint32).astype(xp.uint16)
    values = bfloat16_bits_to_float32(bits)
    finite = ~xp.isnan(values)
    assert bool((float32_to_bfloat16_bits(values)[finite] == bits[finite]).all())


def test_ties_go_to_even():
    one_ulp = 2.0 ** -7  # bfloat16's spacing at 1.0
    x = np.array([1 + one_ulp / 2, 1 + 3 * one_ulp / 2], np.float32)
    assert round_to_bfloat16(x).tolist() == [1.0, 1 + 2 * one_ulp]


def test_wrong_dtype_explains():
    with pytest.raises(TypeError, match="uint16"):
        bfloat16_bits_to_float32(np.zeros(3, np.int32))
