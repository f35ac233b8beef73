"""Shared test parameters: devices, dtypes with their tolerances, and the PyTorch reference."""
import gc

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
