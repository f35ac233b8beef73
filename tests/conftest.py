"""Shared test parameters: devices, dtypes with their tolerances, and the PyTorch reference."""
import gc
import importlib.util
import os
import pathlib

import numpy as np
import pytest

import tinymem as tm
from tinymem import backend

# Devices are a parameter (needle's _DEVICES): cpu always, cuda when CuPy sees a GPU.
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not backend.cuda_available(), reason="needs CuPy and a GPU"))]

# One tolerance per dtype, written down once (relative, absolute).
TOL = {"float64": (1e-7, 1e-9), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3)}

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

requires_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed (pip install .[test])")


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    tm.manual_seed(0)
    yield
    gc.collect()


def to_np(x):
    return x.numpy() if isinstance(x, tm.Tensor) else backend.to_numpy(x)


def assert_close(actual, expected, dtype="float32", what=""):
    rtol, atol = TOL[str(np.dtype(dtype))]
    np.testing.assert_allclose(to_np(actual), to_np(expected), rtol=rtol, atol=atol, err_msg=what)


# Exercise checks, one pytest marker per lesson (as minitorch does).
#
# Each lesson's exercises are functions in ``lessons/exercises/exNN.py`` (the student's file)
# with reference answers in ``lessons/solutions/exNN.py``. The checks in tests/exercises/ run
# against the solutions by default, so CI proves every check can pass; a student checks their
# own work with
#
#     TINYMEM_EXERCISES=student python -m pytest -m exercise_01
LESSONS = pathlib.Path(__file__).resolve().parents[1] / "lessons"


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
