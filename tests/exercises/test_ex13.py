"""Checks for lesson 13, held against the ledger, tinymem's NF4 layer and bitsandbytes' table."""
import gc
import random
from statistics import NormalDist

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, nn, optim
from tinymem.optim import blockwise
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


def _ledger_lora_step(layers, r, adapted):
    """The parameter, gradient and optimizer bytes a real LoRA step adds to the ledger."""
    gc.collect()
    before = {b: memory.live_bytes(b) for b in ("parameter", "gradient", "optimizer")}
    # In the Sequential, Linear i is child 2i (a GELU between each two).
    model = lora.apply_lora(_sequential(layers), r, targets=[str(2 * i) for i in adapted])
    opt = optim.Adam(model.parameters(), lr=1e-3)
    x = tm.randn(3, layers[0][0])
    F.mse_loss(model(x), tm.randn(3, layers[-1][1])).backward()
    opt.step()
    return {b: memory.live_bytes(b) - before[b] for b in before}


def test_lora_step_bytes_match_the_ledger(exercise, forbid):
    cases = [([(8, 16)], 2, [0]), ([(64, 32), (32, 10)], 4, [1]), ([(20, 20), (20, 30), (30, 5)], 8, [0, 2]),
             ([(12, 24), (24, 12)], 3, (0,)), ([(16, 48), (48, 40), (40, 8)], 5, [0, 1, 2])]
    expected = [_ledger_lora_step(*case) for case in cases]
    forbid(lora.apply_lora, lora.LoRALinear, lora.trainable_parameters)
    mod = exercise("ex13")
    for (layers, r, adapted), want in zip(cases, expected):
        assert mod.lora_step_bytes(layers, r, adapted) == want, (layers, r, adapted)


def _normal_float(bits):
    """k-bit NormalFloat as the QLoRA paper builds NF4, written per level: 2**(k-1) quantiles
    above zero stepping from the offset towards 1/2, 2**(k-1) - 1 below, and an exact zero."""
    offset = 1 - (1 / (2 * (2 ** bits - 1)) + 1 / 2 ** (bits + 1)) / 2
    inv, half = NormalDist().inv_cdf, 2 ** (bits - 1)
    above = [inv(offset - j * (offset - 0.5) / half) for j in range(half)]
    below = [-inv(offset - j * (offset - 0.5) / (half - 1)) for j in range(half - 1)]
    return np.array(sorted(below + [0.0] + above)) / above[0]


def test_nf_levels_equal_bitsandbytes_table_and_the_papers_construction(exercise, forbid, monkeypatch):
    forbid(nf4.nf4_levels, nf4.quantize_nf4, nf4.dequantize_nf4, nf4.pair_table)
    for module in (nf4, lora):  # the library's own table reads as NaN while the check runs
        monkeypatch.setattr(module, "LEVELS", np.full(16, np.nan, np.float32))
    mod = exercise("ex13")
    four = np.asarray(mod.nf_levels(4), dtype=np.float64)
    assert four.shape == (16,)
    np.testing.assert_allclose(four, BITSANDBYTES_NF4, rtol=0, atol=1e-6)
    for bits in (2, 3, 5, 6, 8):
        levels = np.asarray(mod.nf_levels(bits), dtype=np.float64)
        assert levels.shape == (2 ** bits,), bits
        np.testing.assert_allclose(levels, _normal_float(bits), rtol=0, atol=1e-9, err_msg=f"{bits} bits")
        assert (levels == 0).sum() == 1 and np.all(np.diff(levels) > 0), bits


def _stored_bits(n, block, block2):
    """Bits per weight of the arrays NF4 stores for n weights, with block and block2 as given."""
    w = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    packed, absmax = nf4.quantize_nf4(w, block)
    stored = packed.nbytes + (absmax.nbytes if block2 is None
                              else sum(a.nbytes for a in lora.quantize_absmax(absmax, block2)))
    return 8 * stored / n


def test_nf4_bits_per_weight_match_the_stored_arrays(exercise, forbid):
    # Block counts that are multiples of block2 (256 and 512 of 256, 64 of 64) and not; odd n;
    # blocks longer than n; the library's default (64, 256) and others.
    cases = [(64 * 256, 64, 256), (64 * 512, 64, 256), (32 * 64, 32, 64), (64 * 256 + 1, 64, 256), (4097, 64, 256),
             (7, 64, 256), (1001, 32, 64), (5000, 4096, 256), (99, 128, None), (12345, 16, 128), (3, 2, 2),
             (128 * 1024, 128, 1024), (100_000, 256, None), (65_535, 8, 512), (64 * 255, 64, 256)]
    rng = random.Random(13)
    for _ in range(25):
        block, block2 = rng.choice([2, 8, 16, 32, 64, 128, 256, 1024]), rng.choice([None, 4, 64, 128, 256, 512])
        blocks = rng.randint(1, 600) if rng.random() < 0.7 else (block2 or 256) * rng.randint(1, 3)
        cases.append((block * blocks - rng.choice([0, 0, 1, block // 2]), block, block2))
    measured = {case: _stored_bits(*case) for case in cases}
    forbid(lora.expected_bits_per_weight, nf4.quantize_nf4, lora.quantize_absmax, blockwise.quantize,
           (lora.NF4Linear, "bits_per_weight"), (lora.NF4Linear, "weight_nbytes"), (lora.NF4Linear, "__init__"))
    mod = exercise("ex13")
    for (n, block, block2), bits in measured.items():
        assert mod.nf4_bits_per_weight(n, block, block2) == pytest.approx(bits, rel=1e-12), (n, block, block2)


def test_qlora_parameter_bytes_match_the_ledger(exercise, forbid):
    # Odd in·out (7·9, 33·5, 129·65): the codes are padded to a whole byte.
    cases = [([(64, 128), (128, 64)], 4), ([(100, 30)], 2), ([(256, 256)] * 3, 8), ([(7, 9), (9, 7)], 3),
             ([(33, 5)], 1), ([(129, 65), (65, 129)], 2)]
    expected = []
    for layers, r in cases:
        gc.collect()
        before = memory.live_bytes("parameter")
        model = lora.apply_qlora(_sequential(layers), r)
        gc.collect()
        expected.append(memory.live_bytes("parameter") - before)
        del model
    forbid(lora.apply_qlora, lora.expected_bits_per_weight, nf4.quantize_nf4, lora.quantize_absmax,
           blockwise.quantize, (lora.NF4Linear, "__init__"))
    mod = exercise("ex13")
    for (layers, r), want in zip(cases, expected):
        assert mod.qlora_parameter_bytes(layers, r) == want, (layers, r)


LAYERS, R, BATCH, BUDGET = [(512, 512)] * 8, 8, 8, int(3.75 * 2**20)
# Not square: a wrong input width fails here (the output's width must be the input's, for the loss).
NARROW = [(256, 384), (384, 320), (320, 256)]


def _reference_peak(layers, r, batch, budget):
    gc.collect()
    tm.manual_seed(0)
    model = lora.apply_qlora(_sequential(layers), r, alpha=2 * r)
    opt = optim.Adam(lora.trainable_parameters(model), lr=1e-3)
    x = tm.randn(batch, layers[0][0])
    peaks = []
    for _ in range(2):
        with memory.track(budget=budget) as t:
            opt.zero_grad()
            F.mse_loss(model(x), x).backward()
            opt.step()
        peaks.append(t.peak())
    return peaks[1]


def test_qlora_step_peak_is_measured_under_a_budget_bf16_weights_exceed(exercise):
    assert 2 * sum(i * o for i, o in LAYERS) > BUDGET  # the premise: bf16 weights alone do not fit
    for layers, r, batch, budget in ((LAYERS, R, BATCH, BUDGET), (NARROW, 4, 5, 16 * 2**20)):
        expected = _reference_peak(layers, r, batch, budget)
        gc.collect()
        got = exercise("ex13").qlora_step_peak(layers, r, batch, budget)
        assert got == expected and got <= budget, (layers, r, batch)
