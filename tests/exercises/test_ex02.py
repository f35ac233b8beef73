"""Checks for lesson 2's exercises (half-precision formats and loss scaling)."""
import math
import struct

import numpy as np
import pytest

import tinymem as tm
from tinymem import optim
from tinymem.techniques.precision import GradScaler
from tinymem.techniques.precision.bfloat16 import float32_to_bfloat16_bits, round_to_bfloat16
from tinymem.techniques.precision.formats import HalfFormat

pytestmark = pytest.mark.exercise_02

FP16_CASES = [0.0, -0.0, 1.0, -2.5, 65504.0, 6.103515625e-05, 5.960464477539063e-08, 3.0e-6, 1e-4, math.inf]


def test_fields_and_value_round_trip(exercise):
    mod = exercise("ex02")
    for x in FP16_CASES:
        sign, exponent, mantissa = mod.fp16_fields(x)
        assert 0 <= exponent < 32 and 0 <= mantissa < 1024 and sign in (0, 1), x
        bits = int(np.float16(x).view(np.uint16))
        assert (sign << 15) | (exponent << 10) | mantissa == bits, x
        value = mod.fp16_value(sign, exponent, mantissa)
        assert value == float(np.float16(x)) and math.copysign(1, value) == math.copysign(1, float(np.float16(x))), x


def test_fp16_value_is_computed_not_reinterpreted(exercise, forbid):
    fields = [(s, e, m) for s in (0, 1) for e in range(32) for m in range(0, 1024, 7)]
    expected = [float(np.uint16((s << 15) | (e << 10) | m).view(np.float16)) for s, e, m in fields]
    forbid((np, "float16"), (struct, "unpack"))  # NumPy's and struct's half floats answer for you
    value = exercise("ex02").fp16_value
    for (s, e, m), want in zip(fields, expected):
        got = value(s, e, m)
        assert got == want or (math.isnan(got) and math.isnan(want)), (s, e, m)


def test_nan_fields(exercise):
    mod = exercise("ex02")
    assert math.isnan(mod.fp16_value(*mod.fp16_fields(float("nan"))))


def test_bfloat16_bits_match_tinymem(exercise, forbid):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    ties = np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 2 + 2**-7], np.float32)  # exactly halfway
    nans = np.array([0x7F800001, 0xFFC00000, 0x7FFFFFFF], np.uint32).view(np.float32)
    x = np.concatenate([x, ties, nans, np.array([np.inf, -0.0, 3.4028235e38, 65504.0, 1e-40], np.float32)])
    expected = float32_to_bfloat16_bits(x)
    forbid(float32_to_bfloat16_bits, round_to_bfloat16, (HalfFormat, "encode"))
    ours = np.asarray(exercise("ex02").to_bfloat16_bits(x.copy()))
    assert ours.dtype == np.uint16
    assert np.array_equal(ours, expected)


@pytest.mark.parametrize("growth_interval", [1, 3])
def test_update_scale_follows_grad_scaler(exercise, forbid, growth_interval):
    w = tm.tensor(np.ones(2, np.float32), requires_grad=True)
    opt = optim.SGD([w], lr=0.0)
    scaler = GradScaler(init_scale=2.0**10, growth_interval=growth_interval)
    bad_steps, expected = (4, 7, 8), []
    for step in range(12):
        opt.zero_grad()
        x = np.array([np.inf if step in bad_steps else 1.0, 1.0], np.float32)
        scaler.scale((w * tm.tensor(x)).sum()).backward()
        scaler.step(opt)
        scaler.update()
        expected.append((scaler.get_scale(), scaler.state_dict()["_growth_tracker"]))
    forbid(GradScaler)
    mod = exercise("ex02")
    scale, tracker = 2.0**10, 0
    for step, want in enumerate(expected):
        scale, tracker = mod.update_scale(scale, tracker, step in bad_steps, growth_interval=growth_interval)
        assert (scale, tracker) == want, f"after step {step}"


def test_largest_safe_scale(exercise):
    for g in (1.0, 3.0, 1e-3, 65504.0, 0.7, 12345.678, 65510.0, 32760.0, 2.0**-30):
        s = exercise("ex02").largest_safe_scale(g)
        assert math.log2(s) == int(math.log2(s)), g
        with np.errstate(over="ignore"):
            assert np.isfinite(np.float16(g * s)) and np.isinf(np.float16(g * 2 * s)), g
