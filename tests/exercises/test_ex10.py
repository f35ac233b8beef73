"""Checks for lesson 10 (replay memory), and proof that plausible wrong answers fail them."""
import numpy as np
import pytest

from exercise_checks import assert_fails_only_its_check, forbidding, wrong_answers
from tinymem.rl import ReplayBuffer, bytes_per_slot
from tinymem.rl import stack_slots as reference_stack_slots

pytestmark = pytest.mark.exercise_10


def _random_buffer(rng, capacity, k, steps=400):
    buf = ReplayBuffer(capacity, (2,), k, "dedup")
    buf.start_episode(np.zeros(2, np.uint8))
    for _ in range(steps):
        if rng.random() < 0.08:
            buf.start_episode(np.zeros(2, np.uint8))
        buf.add(0, 0.0, np.zeros(2, np.uint8))
    return buf


def check_stack_slots(mod):
    rng = np.random.default_rng(0)
    cases = [(rng.integers(10, 1000, 200), rng.integers(0, 8, 200), k) for k in (1, 2, 4, 5)]
    expected = [reference_stack_slots(*case) for case in cases]
    with forbidding(reference_stack_slots):
        assert np.array_equal(mod.stack_slots(np.array([10]), np.array([2]), 4), [[8, 8, 9, 10]])
        for case, want in zip(cases, expected):
            assert np.array_equal(np.asarray(mod.stack_slots(*case)), want), case[2]


def check_sampleable(mod):
    rng = np.random.default_rng(1)
    for capacity, k in ((50, 4), (50, 1), (30, 3), (1000, 4)):
        buf = _random_buffer(rng, capacity, k)
        numbers = np.arange(buf.written + 5)
        steps = buf.step[numbers % capacity]
        got = np.asarray(mod.sampleable(numbers, steps, buf.written, capacity, k), bool)
        assert np.array_equal(got, buf.sampleable(numbers)), (capacity, k)


def check_bytes_per_transition(mod):
    cases = [(scheme, shape, k) for scheme in ("float32", "uint8", "dedup")
             for shape, k in (((84, 84), 4), ((4,), 1), ((40, 60), 2))]
    expected = [bytes_per_slot(*case) for case in cases]
    buf = ReplayBuffer(100, (84, 84), 4, "uint8")
    with forbidding(bytes_per_slot):
        for case, want in zip(cases, expected):
            assert mod.bytes_per_transition(*case) == want, case
        assert 100 * mod.bytes_per_transition("uint8", (84, 84), 4) == buf.nbytes["host"]


def check_capacity_for_budget(mod):
    per = {scheme: bytes_per_slot(scheme, (84, 84), 4) for scheme in ("float32", "uint8", "dedup")}
    with forbidding(bytes_per_slot):
        for scheme, each in per.items():
            for budget in (10 * 2**30, each * 1000, each * 1000 - 1, each - 1):
                c = mod.capacity_for_budget(budget, scheme, (84, 84), 4)
                assert c * each <= budget < (c + 1) * each, (scheme, budget, c)
        assert mod.capacity_for_budget(24 * 2**30, "dedup", (84, 84), 4) > 3_000_000


CHECKS = {"stack_slots": check_stack_slots, "sampleable": check_sampleable,
          "bytes_per_transition": check_bytes_per_transition, "capacity_for_budget": check_capacity_for_budget}


@pytest.mark.parametrize("name", list(CHECKS))
def test_exercise(exercise, name):
    CHECKS[name](exercise("ex10"))


@pytest.mark.parametrize("path", wrong_answers("ex10"), ids=lambda p: p.stem)
def test_a_wrong_answer_fails_its_check_and_only_its_check(path):
    assert_fails_only_its_check("ex10", path, CHECKS)
