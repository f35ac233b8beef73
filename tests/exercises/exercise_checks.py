"""Running an exercise's checks against a module, and proving that plausible wrong answers fail.

``tests/exercises/wrong/exNN_*.py`` each get one function of lesson NN wrong on purpose (named
by their ``TARGET``); :func:`with_wrong` lays that function over the reference answers, so the
check of that exercise must fail while every other check still passes.
"""
import contextlib
import importlib.util
import pathlib
import types

import pytest
from conftest import forbid_in

WRONG = pathlib.Path(__file__).resolve().parent / "wrong"
SOLUTIONS = pathlib.Path(__file__).resolve().parents[2] / "lessons" / "solutions"


def load_path(path, prefix):
    spec = importlib.util.spec_from_file_location(f"{prefix}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_wrong(lesson, path):
    """The reference answers of ``lesson`` (always the solutions, whoever runs the tests) with
    the wrong module's functions laid over them."""
    solution = load_path(SOLUTIONS / f"{lesson}.py", "solution")
    wrong = load_path(path, "wrong")
    merged = types.SimpleNamespace(**{k: v for k, v in vars(solution).items() if not k.startswith("__")})
    for name, value in vars(wrong).items():
        if callable(value) and not name.startswith("_") and hasattr(solution, name):
            setattr(merged, name, value)
    return merged, wrong.TARGET


def wrong_answers(lesson):
    return sorted(WRONG.glob(f"{lesson}_*.py"))


def assert_fails_only_its_check(lesson, path, checks):
    """The wrong answer at ``path`` fails the check of the exercise it targets, and only that."""
    module, target = with_wrong(lesson, path)
    with pytest.raises(AssertionError):
        checks[target](module)
    for name, check in checks.items():
        if name != target:
            check(module)


@contextlib.contextmanager
def forbidding(*targets):
    """Inside the block, tinymem's own ``targets`` refuse to run, under every name (``forbid_in`` of
    tests/conftest.py): a check computes its reference first, then calls the answer in the block."""
    with pytest.MonkeyPatch.context() as patch:
        forbid_in(patch, *targets, everywhere=True)
        yield
