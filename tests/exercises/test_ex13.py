"""Checks for lesson 13, held against the ledger, tinymem's NF4 layer and bitsandbytes' table."""
import gc
import random

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, nn, optim
from tinymem.techniques import lora
from tinymem.techniques.lora import nf4

pytestmark = pytest.mark.exercise_13

# bitsandbytes' published NF4 table (csrc/kernels.cu), as in tests/techniques/lora/test_nf4.py.
BITSANDBYTES_NF4 = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]


def _sequential(layers):
    parts = []
    for d_in, d_out in layers:
        parts += [nn.Linear(d_in, d_out), nn.GELU()]
    return nn.Sequential(*parts[:-1])


def _ledger_lora_step(layers, r):
    """The parameter, gradient and optimizer bytes a real LoRA step adds to the ledger."""
    gc.collect()
    before = {b: memory.live_bytes(b) for b in ("parameter", "gradient", "optimizer")}
    model = lora.apply_lora(_sequential(layers), r)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    x = tm.randn(3, layers[0][0])
    F.mse_loss(model(x), tm.randn(3, layers[-1][1])).backward()
    opt.step()
    return {b: memory.live_bytes(b) - before[b] for b in before}


def test_lora_step_bytes_match_the_ledger(exercise, forbid):
    cases = [([(8, 16)], 2), ([(64, 32), (32, 10)], 4), ([(20, 20), (20, 30), (30, 5)], 8)]
    expected = [_ledger_lora_step(layers, r) for layers, r in cases]
    forbid(lora.apply_lora, lora.LoRALinear, lora.trainable_parameters)
    mod = exercise("ex13")
    for (layers, r), want in zip(cases, expected):
        assert mod.lora_step_bytes(layers, r) == want, (layers, r)


def test_nf4_levels_equal_bitsandbytes_table(exercise, forbid, monkeypatch):
    forbid(nf4.nf4_levels, nf4.quantize_nf4, nf4.dequantize_nf4, nf4.pair_table)
    for module in (nf4, lora):  # the library's own table reads as NaN while the check runs
        monkeypatch.setattr(module, "LEVELS", np.full(16, np.nan, np.float32))
    levels = np.asarray(exercise("ex13").nf4_levels(), dtype=np.float64)
    assert levels.shape == (16,)
    np.testing.assert_allclose(levels, BITSANDBYTES_NF4, rtol=0, atol=1e-6)
    assert (levels == 0).sum() == 1 and np.all(np.diff(levels) > 0)


def test_nf4_bits_per_weight_match_the_stored_arrays(exercise, forbid):
    measured = {}
    for shape in ((64, 64), (100, 3), (1024, 257), (7, 1)):
        linear = nn.Linear(shape[1], shape[0])
        for dq in (True, False):
            stored = lora.NF4Linear.from_linear(linear, dq).weight_nbytes()
            measured[shape[0] * shape[1], dq] = 8 * stored / (shape[0] * shape[1])
    rng = random.Random(13)
    more = {(n, dq): lora.expected_bits_per_weight(n, dq) for n in [rng.randint(1, 10**6) for _ in range(100)]
            for dq in (True, False)}
    forbid(lora.expected_bits_per_weight, (lora.NF4Linear, "bits_per_weight"), (lora.NF4Linear, "weight_nbytes"),
           (lora.NF4Linear, "__init__"))
    mod = exercise("ex13")
    for (n, dq), bits in {**measured, **more}.items():
        assert mod.nf4_bits_per_weight(n, dq) == pytest.approx(bits, rel=1e-12), (n, dq)


def test_qlora_parameter_bytes_match_the_ledger(exercise, forbid):
    cases = [([(64, 128), (128, 64)], 4), ([(100, 30)], 2), ([(256, 256)] * 3, 8)]
    expected = []
    for layers, r in cases:
        gc.collect()
        before = memory.live_bytes("parameter")
        model = lora.apply_qlora(_sequential(layers), r)
        gc.collect()
        expected.append(memory.live_bytes("parameter") - before)
        del model
    forbid(lora.apply_qlora, lora.expected_bits_per_weight, (lora.NF4Linear, "__init__"))
    mod = exercise("ex13")
    for (layers, r), want in zip(cases, expected):
        assert mod.qlora_parameter_bytes(layers, r) == want, (layers, r)


LAYERS, R, BATCH, BUDGET = [(512, 512)] * 8, 8, 8, int(3.75 * 2**20)


def _reference_peak():
    gc.collect()
    tm.manual_seed(0)
    model = lora.apply_qlora(_sequential(LAYERS), R, alpha=2 * R)
    opt = optim.Adam(lora.trainable_parameters(model), lr=1e-3)
    x = tm.randn(BATCH, LAYERS[0][0])
    peaks = []
    for _ in range(2):
        with memory.track(budget=BUDGET) as t:
            opt.zero_grad()
            F.mse_loss(model(x), x).backward()
            opt.step()
        peaks.append(t.peak())
    return peaks[1]


def test_qlora_step_peak_is_measured_under_a_budget_bf16_weights_exceed():
    assert 2 * sum(i * o for i, o in LAYERS) > BUDGET  # the premise: bf16 weights alone do not fit


def test_qlora_step_peak_equals_the_second_steps_measured_peak(exercise):
    expected = _reference_peak()
    gc.collect()
    got = exercise("ex13").qlora_step_peak(LAYERS, R, BATCH, BUDGET)
    assert got == expected and got <= BUDGET
