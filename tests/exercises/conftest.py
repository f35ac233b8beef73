"""Exercise checks, one pytest marker per lesson (as minitorch does).

Each lesson's exercises are functions in ``lessons/exercises/exNN.py`` (the student's file)
with reference answers in ``lessons/solutions/exNN.py``. The checks here run against the
solutions by default, so CI proves every check can pass; a student checks their own work with

    TINYMEM_EXERCISES=student python -m pytest -m exercise_01
"""
import importlib.util
import os
import pathlib

import pytest

LESSONS = pathlib.Path(__file__).resolve().parents[2] / "lessons"


def load_exercise(name):
    """Import ``lessons/{exercises|solutions}/{name}.py`` as a module."""
    folder = "exercises" if os.environ.get("TINYMEM_EXERCISES") == "student" else "solutions"
    path = LESSONS / folder / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"{folder}_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def exercise():
    return load_exercise
