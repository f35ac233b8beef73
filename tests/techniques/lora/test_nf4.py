"""NF4 levels against bitsandbytes' published table, round trips within half a level, double
quantization's bits per weight from the stored arrays, and NF4Linear's ledger: one layer's
dequantized weight alive at a time."""
import numpy as np
import pytest
from conftest import to_np
from hypothesis import given, strategies as st

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, nn, optim
from tinymem.techniques.lora import (LEVELS, NF4Linear, apply_qlora, dequantize_absmax, dequantize_nf4,
                                     expected_bits_per_weight, quantize_absmax, quantize_nf4, trainable_parameters)

# The NF4 table of bitsandbytes 0.50.2.dev0 (commit 95f9af30): get_4bit_type("nf4") in
# bitsandbytes/functional.py makes these literals float32 and divides them by their largest |value|
# (1.0); its kernels (csrc/kernels.cu, cpu_ops.cpp) hold the same constants. Also Appendix E of the QLoRA paper.
BITSANDBYTES_NF4 = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                             -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                             0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                             0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], np.float32)


def test_levels_equal_bitsandbytes_float32_table_bit_for_bit():
    assert LEVELS.dtype == np.float32
    assert (LEVELS > 0).sum() == 8 and (LEVELS < 0).sum() == 7 and (LEVELS == 0).sum() == 1
    np.testing.assert_array_equal(LEVELS.view(np.uint32), BITSANDBYTES_NF4.view(np.uint32))
    with pytest.raises(ValueError, match="read-only"):  # the codebooks are made from it once
        LEVELS[0] = 0


def test_a_weight_equal_to_a_bitsandbytes_level_round_trips_and_gets_its_code():
    w = np.concatenate([BITSANDBYTES_NF4, BITSANDBYTES_NF4[::-1] * np.float32(0.5)])  # block 0 scale 1, block 1 0.5
    packed, absmax = quantize_nf4(w, block=16)
    codes = np.stack([packed & 15, packed >> 4], axis=1).reshape(-1)
    np.testing.assert_array_equal(codes, np.concatenate([np.arange(16), np.arange(16)[::-1]]))
    np.testing.assert_array_equal(dequantize_nf4(packed, absmax, w.size, block=16), w)


def test_codes_are_the_nearest_bitsandbytes_level():
    w = np.random.default_rng(0).standard_normal(64 * 500).astype(np.float32)
    packed, absmax = quantize_nf4(w)
    codes = np.stack([packed & 15, packed >> 4], axis=1).reshape(-1)
    scaled = (w.reshape(-1, 64) / absmax[:, None]).reshape(-1)
    distance = np.abs(scaled[:, None].astype(np.float64) - BITSANDBYTES_NF4[None, :])
    chosen = distance[np.arange(w.size), codes]
    assert np.all(chosen <= distance.min(axis=1))


def _half_level_bound(w, scales, block=64):
    """Per value: half the gap between the two levels around w / scale, times the scale."""
    scale = np.repeat(scales, block)[:w.size]
    z = np.clip(w / np.where(scale == 0, 1, scale), -1, 1)
    hi = np.clip(np.searchsorted(LEVELS, z), 1, 15)
    return (LEVELS[hi] - LEVELS[hi - 1]) / 2 * scale


@given(st.integers(1, 400), st.floats(1e-3, 1e3), st.integers(0, 2 ** 31))
def test_round_trip_is_within_half_a_level_of_its_block_scale(size, spread, seed):
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal(size) * spread).astype(np.float32)
    w[rng.random(size) < 0.1] = 0
    packed, absmax = quantize_nf4(w)
    assert packed.dtype == np.uint8 and packed.size == (size + 1) // 2
    back = dequantize_nf4(packed, absmax, size)
    err = np.abs(back - w)
    assert np.all(err <= _half_level_bound(w, absmax) * (1 + 1e-6) + 1e-30)
    assert np.all(back[w == 0] == 0)  # zero is a level: exact


@given(st.integers(64, 64 * 600), st.integers(0, 2 ** 31))
def test_double_quantized_scales_move_each_weight_by_at_most_their_own_error(size, seed):
    w = np.random.default_rng(seed).standard_normal(size).astype(np.float32)
    packed, absmax = quantize_nf4(w)
    scales = dequantize_absmax(*quantize_absmax(absmax))
    assert scales.dtype == np.float32 and scales.shape == absmax.shape
    # The dynamic map's largest gap is 0.0141: the scale moves by at most half of it times the
    # largest |scale - mean| of its 256-block.
    assert np.abs(scales - absmax).max() <= 0.0071 * np.abs(absmax - absmax.mean()).max() + 1e-6
    bound = _half_level_bound(w, absmax) + np.repeat(np.abs(scales - absmax), 64)[:size]
    assert np.all(np.abs(dequantize_nf4(packed, scales, size) - w) <= bound * (1 + 1e-5))


@pytest.mark.parametrize("double_quant,bits", [(True, 4.127), (False, 4.5)])
def test_bits_per_weight_measured_from_the_stored_arrays(device, double_quant, bits):
    linear = nn.Linear(1024, 1024, device=device)
    layer = NF4Linear.from_linear(linear, double_quant)
    stored = sum(a.nbytes for a in layer.stored().values())
    measured = 8 * stored / (1024 * 1024)
    assert measured == pytest.approx(bits, abs=1e-3)
    assert measured == pytest.approx(expected_bits_per_weight(1024 * 1024, double_quant), rel=1e-12)
    assert layer.bits_per_weight() == measured
    assert all(memory.locate(a) == ("parameter", "device") for a in layer.stored().values())


def test_nf4_linear_computes_with_the_dequantized_weight_and_passes_the_input_gradient(device):
    linear = nn.Linear(96, 40, device=device)
    layer = NF4Linear.from_linear(linear)
    w = to_np(layer.dequantize())
    assert np.abs(w - to_np(linear.weight)).max() < 0.2 * np.abs(to_np(linear.weight)).max()
    x = tm.tensor(np.random.default_rng(0).standard_normal((3, 96)).astype(np.float32), requires_grad=True,
                  device=device)
    y = layer(x)
    np.testing.assert_allclose(to_np(y), to_np(x) @ w.T + to_np(linear.bias), rtol=1e-5, atol=1e-5)
    g = np.random.default_rng(1).standard_normal((3, 40)).astype(np.float32)
    (y * tm.tensor(g, device=device)).sum().backward()
    np.testing.assert_allclose(to_np(x.grad), g @ w, rtol=1e-5, atol=1e-5)
    assert layer.bias.grad is None


def _live_by_label(events, label):
    """Largest number of bytes carrying ``label`` that were alive at once, from a timeline."""
    live = most = 0
    for e in events:
        if e["label"] == label and e["bucket"] == "workspace":
            live += e["bytes"] if e["kind"] == "alloc" else -e["bytes"]
            most = max(most, live)
    return most


def test_the_ledger_shows_one_dequantized_layer_at_a_time(device):
    model = nn.Sequential(nn.Linear(128, 256, device=device), nn.GELU(), nn.Linear(256, 192, device=device),
                          nn.GELU(), nn.Linear(192, 128, device=device))
    apply_qlora(model, r=4, alpha=8)
    opt = optim.Adam(trainable_parameters(model), lr=1e-3)
    x = tm.tensor(np.random.default_rng(0).standard_normal((8, 128)).astype(np.float32), device=device)
    with memory.track(device=device) as t:
        F.mse_loss(model(x), x).backward()
        opt.step()
    largest = 4 * 256 * 192
    assert _live_by_label(t.timeline(), "nf4 weight") == largest, t.table()
    events = [e for e in t.timeline() if e["label"] == "nf4 weight"]
    made = [e["bytes"] for e in events if e["kind"] == "alloc"]
    # Each layer's weight made in forward, and again in backward for the input's gradient,
    # except the first layer's: its input needs none.
    assert made == [4 * 256 * 128, 4 * 192 * 256, 4 * 128 * 192, 4 * 128 * 192, 4 * 192 * 256]
    assert sum(e["bytes"] for e in events if e["kind"] == "free") == sum(made)  # none survives the step
    assert all(p.grad is None for n, p in model.named_parameters() if "lora_" not in n)


def test_a_qlora_model_starts_where_the_nf4_rounded_model_is(device):
    linear = nn.Linear(64, 32, device=device)
    x = tm.tensor(np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32), device=device)
    model = nn.Sequential(linear)
    reference = NF4Linear.from_linear(linear)
    with tm.no_grad():
        expected = to_np(reference(x))
        apply_qlora(model, r=2)
        np.testing.assert_array_equal(to_np(model(x)), expected)
    with pytest.raises(TypeError, match="re-quantized"):
        model[0].merge()


def test_nf4_linear_refuses_what_is_not_a_float_matrix():
    with pytest.raises(TypeError, match="2-d float weight"):
        NF4Linear(np.zeros(16, np.float32))
    with pytest.raises(TypeError, match="2-d float weight"):
        NF4Linear(np.zeros((4, 4), np.int64))
