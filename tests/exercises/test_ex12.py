"""Checks for lesson 12's exercises, and proof that each plausible wrong answer in
``tests/exercises/wrong/ex12_*.py`` fails the check of its exercise, and only that one."""
import random

import pytest
from exercise_checks import assert_fails_only_its_check, forbidding, wrong_answers

from tinymem.planner import activations, exactness, fits
from tinymem.planner.terms.analytic import Stack

pytestmark = pytest.mark.exercise_12


def check_layer_activation_bytes(ex):
    rng = random.Random(12)
    cases = []
    for _ in range(50):
        heads = rng.choice([1, 2, 4, 8, 12])
        s, b, h = rng.randint(1, 512), rng.randint(1, 8), heads * rng.randint(1, 64)
        for storage, width in (("fp32", 4), ("bf16", 2)):
            cases.append(((s, b, h, heads, width), activations.activations_per_layer(s, b, h, heads, storage=storage)))
    # Against the ledger: a second block adds exactly one block's saved tensors.
    one, two = (exactness.measure((16, 8, 12, 3, layers), 2, Stack())["buckets"]["activation"] for layers in (1, 2))
    with forbidding(activations.activations_per_layer, activations.layer_terms):
        for args, expected in cases:
            assert ex.layer_activation_bytes(*args) == expected, args
        assert ex.layer_activation_bytes(8, 2, 12, 3, 4) == two - one


def check_fewest_gpus(ex):
    assert ex.fewest_gpus(7.5e9, 16, 0, 32e9) == 4       # 120 GB of model states: 3 x 32 GB is not enough
    assert ex.fewest_gpus(7.5e9, 16, 2e9, 122e9) == 1
    assert ex.fewest_gpus(1e9, 16, 80e9, 80e9) is None   # the activations alone fill the GPU
    assert ex.fewest_gpus(100, 4, 0, 200) == 2           # exactly full at 2 GPUs: that fits
    assert ex.fewest_gpus(100, 4, 50, 250) == 2
    rng = random.Random(0)
    for _ in range(200):
        params, per, fixed, memory = rng.randint(1, 10**6), rng.choice([2, 4, 16, 18]), rng.randint(0, 10**5), \
            rng.randint(1, 10**6)
        brute = next((n for n in range(1, 10**7) if per * params / n + fixed <= memory), None) \
            if fixed < memory else None
        assert ex.fewest_gpus(params, per, fixed, memory) == brute, (params, per, fixed, memory)


def check_first_stack_that_fits(ex):
    eight, four, single = fits.stacks(8), fits.stacks(4), fits.stacks(1)
    rows8, _ = fits.plan_arch("llama-7b", 8, 80e9)
    rows4, _ = fits.plan_arch("llama-7b", 4, 40e9)
    # A GPU where plain fp32 + Adam's model states fit but its activations do not.
    first = fits.run("gpt2", 1, single[0][1])
    states = sum(first.moments["optimizer step"][b] for b in ("parameter", "gradient", "optimizer"))
    between = (states + first.peak) / 2
    rows1, _ = fits.plan_arch("gpt2", 1, between)
    # Budgets at a step's peak exactly, and between the step's peak and the sum of its buckets'
    # own peaks (each bucket peaks at its own moment: their sum is not memory ever in use).
    name, stack = single[1]
    step = fits.run("gpt2", 1, stack)
    assert step.peak < sum(step.buckets.values())
    roomy = max(fits.run("gpt2", 1, s).peak for _, s in single)  # every stack fits: the order decides
    # On 4 GPUs a micro-batch is still one sequence: a budget at that step's peak is one that a
    # micro-batch of one sequence per GPU exceeds.
    name4, stack4 = four[0]
    peak4 = fits.run("gpt2", 1, stack4).peak
    assert fits.run("gpt2", 4, stack4).peak > peak4
    with forbidding(fits.plan_arch, fits.table, fits.summary, fits.fewest_gpus):
        assert ex.first_stack_that_fits("llama-7b", 8, 80e9, eight) == next(r.name for r in rows8 if r.fits)
        assert ex.first_stack_that_fits("llama-7b", 4, 40e9, four) == next(r.name for r in rows4 if r.fits)
        # 8 GPUs hold GPT-3 175B with ZeRO-Offload (2 bytes a parameter over 8); 4 do not
        assert ex.first_stack_that_fits("gpt3-175b", 4, 80e9, four) is None
        assert ex.first_stack_that_fits("gpt2", 1, between, single) == next(r.name for r in rows1 if r.fits) \
            != single[0][0]
        assert ex.first_stack_that_fits("gpt2", 1, step.peak, [(name, stack)]) == name
        assert ex.first_stack_that_fits("gpt2", 1, (step.peak + sum(step.buckets.values())) / 2, [(name, stack)]) \
            == name
        assert ex.first_stack_that_fits("gpt2", 1, roomy, single[::-1]) == single[-1][0]
        assert ex.first_stack_that_fits("gpt2", 4, peak4, [(name4, stack4)]) == name4
        # Bytes against bytes: 3% under the peak does not fit (a peak in GiB against GB would, by 7%).
        assert ex.first_stack_that_fits("gpt2", 1, 0.97 * step.peak, [(name, stack)]) is None


CHECKS = {"layer_activation_bytes": check_layer_activation_bytes, "fewest_gpus": check_fewest_gpus,
          "first_stack_that_fits": check_first_stack_that_fits}


@pytest.mark.parametrize("name", list(CHECKS))
def test_exercise(exercise, name):
    CHECKS[name](exercise("ex12"))


@pytest.mark.parametrize("path", wrong_answers("ex12"), ids=lambda p: p.stem)
def test_a_wrong_answer_fails_its_check_and_only_its_check(path):
    assert_fails_only_its_check("ex12", path, CHECKS)
