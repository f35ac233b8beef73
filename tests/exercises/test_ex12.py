"""Checks for lesson 12's exercises, and proof that they reject plausible wrong answers
(``tests/exercises/wrong/ex12_*.py``)."""
import pathlib
import random

import pytest
from exercise_checks import load_path

from tinymem.planner import activations, exactness, fits
from tinymem.planner.analytic import Stack

pytestmark = pytest.mark.exercise_12
WRONG = sorted((pathlib.Path(__file__).parent / "wrong").glob("ex12_*.py"))


def check_layer_activation_bytes(ex):
    rng = random.Random(12)
    for _ in range(50):
        heads = rng.choice([1, 2, 4, 8, 12])
        s, b, h = rng.randint(1, 512), rng.randint(1, 8), heads * rng.randint(1, 64)
        for storage, width in (("fp32", 4), ("bf16", 2)):
            expected = activations.activations_per_layer(s, b, h, heads, storage=storage)
            assert ex.layer_activation_bytes(s, b, h, heads, width) == expected, (s, b, h, heads, width)
    # Against the ledger: a second block adds exactly one block's saved tensors.
    one, two = (exactness.measure((16, 8, 12, 3, layers), 2, Stack())["buckets"]["activation"] for layers in (1, 2))
    assert ex.layer_activation_bytes(8, 2, 12, 3, 4) == two - one


def check_fewest_gpus(ex):
    assert ex.fewest_gpus(7.5e9, 16, 0, 32e9) == 4       # 120 GB of model states: 3 x 32 GB is not enough
    assert ex.fewest_gpus(7.5e9, 16, 2e9, 122e9) == 1
    assert ex.fewest_gpus(1e9, 16, 80e9, 80e9) is None   # the activations alone fill the GPU
    rng = random.Random(0)
    for _ in range(200):
        params, per, fixed, memory = rng.randint(1, 10**6), rng.choice([2, 4, 16, 18]), rng.randint(0, 10**5), \
            rng.randint(1, 10**6)
        brute = next((n for n in range(1, 10**7) if per * params / n + fixed <= memory), None) \
            if fixed < memory else None
        assert ex.fewest_gpus(params, per, fixed, memory) == brute, (params, per, fixed, memory)


def check_first_stack_that_fits(ex):
    stacks = fits.stacks(8)
    rows, _ = fits.plan_arch("llama-7b", 8, 80e9)
    expected = next(r.name for r in rows if r.fits)
    assert ex.first_stack_that_fits("llama-7b", 8, 80e9, stacks) == expected
    # 8 GPUs hold GPT-3 175B with ZeRO-Offload (2 bytes a parameter over 8); 4 do not
    assert ex.first_stack_that_fits("gpt3-175b", 4, 80e9, fits.stacks(4)) is None
    # A GPU where plain fp32 + Adam's model states fit but its activations do not.
    first = fits.run("gpt2", 1, stacks[0][1])
    states = sum(first.moments["optimizer step"][b] for b in ("parameter", "gradient", "optimizer"))
    memory = (states + first.peak) / 2
    rows, _ = fits.plan_arch("gpt2", 1, memory)
    single = fits.stacks(1)
    assert ex.first_stack_that_fits("gpt2", 1, memory, single) == next(r.name for r in rows if r.fits) != single[0][0]


CHECKS = [check_layer_activation_bytes, check_fewest_gpus, check_first_stack_that_fits]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_exercise(exercise, check):
    check(exercise("ex12"))


@pytest.mark.parametrize("path", WRONG, ids=lambda p: p.stem)
@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
def test_the_checks_reject_a_plausible_wrong_answer(path, check):
    with pytest.raises((AssertionError, TypeError, ValueError)):
        check(load_path(path, "wrong"))


def test_there_are_wrong_answers_to_reject():
    assert len(WRONG) >= 2
