"""The checks of lesson 9 fail on plausible wrong answers (tests/exercises/wrong/ex09_*.py).

A check that passes a wrong answer teaches the wrong thing. Each file there holds one exercise
function with a mistake a student could make; put in place of the reference answer's, the check
of that exercise must catch it.
"""
import pathlib

import pytest

import test_ex09
from exercise_checks import load_path

WRONG = pathlib.Path(__file__).resolve().parent / "wrong"
SOLUTION = pathlib.Path(__file__).resolve().parents[2] / "lessons" / "solutions" / "ex09.py"
CAUGHT_BY = {
    "ex09_no_warmup": "check_leaked_bytes_per_step",
    "ex09_append_tensor": "check_logged_step",
    "ex09_append_data": "check_logged_step",
    "ex09_all_buckets": "check_activation_bytes_by_module",
    "ex09_no_depth": "check_activation_bytes_by_module",
    "ex09_whole_budget": "check_micro_batches_for",
    "ex09_most_batches": "check_micro_batches_for",
    "ex09_largest_fitting_peak": "check_micro_batches_for",
    "ex09_library_find_leaks": "check_leaked_bytes_per_step",
    "ex09_one_step": "check_leaked_bytes_per_step",
    "ex09_integer_division": "check_leaked_bytes_per_step",
    "ex09_device_only": "check_leaked_bytes_per_step",
    "ex09_no_collection": "check_leaked_bytes_per_step",
}


def _load(name):
    """The reference answers with the one mistaken function of ``wrong/<name>.py`` in place."""
    answers = load_path(SOLUTION, f"solution_for_{name}")
    wrong = load_path(WRONG / f"{name}.py", "wrong")
    mistaken = {k: v for k, v in vars(wrong).items() if callable(v) and hasattr(answers, k)
                and getattr(v, "__module__", None) == wrong.__name__}
    assert len(mistaken) == 1, f"{name} should hold exactly one exercise function, has {sorted(mistaken)}"
    vars(answers).update(mistaken)
    return answers


def test_every_wrong_answer_is_listed():
    assert sorted(p.stem for p in WRONG.glob("ex09_*.py")) == sorted(CAUGHT_BY)


@pytest.mark.parametrize("name", sorted(CAUGHT_BY))
def test_the_check_catches_a_plausible_wrong_answer(name):
    check = getattr(test_ex09, CAUGHT_BY[name])
    with pytest.raises((AssertionError, KeyError)):
        check(_load(name))
