"""The NumPy/CuPy switch.

A device is a name: ``"cpu"`` means NumPy arrays in host RAM, ``"cuda"`` means CuPy arrays
in GPU memory. Every op asks :func:`array_module` for the module that owns its inputs and
calls only functions that NumPy and CuPy share, so one code path serves both (DeZero's
``get_array_module``).

CuPy is imported only when a ``"cuda"`` device is asked for, so a CPU-only machine never
needs it. One default device decides where everything is made when no ``device=`` is given
(as ``torch.set_default_device`` does): :func:`set_default_device`, first read from the
``TINYMEM_DEVICE`` environment variable (``cpu`` when unset).

Test-only seam: :func:`use_cuda_module` serves another module in place of CuPy (the tests'
NumPy-backed stand-in, ``tests/standin_cupy.py``, so CI without a GPU has a second device);
``TINYMEM_CUDA_STANDIN=1`` installs that stand-in in a process the tests start (lessons,
``tinymem figures``). Neither is for users.

Memory cost: none; this module only routes.
"""
import contextlib
import os
import pathlib

import numpy as np

DEVICES = ("cpu", "cuda")

# Dtypes a Tensor may hold. bfloat16 is not here: NumPy has no such dtype, so tinymem stores
# bfloat16 as uint16 bit patterns (see tinymem.techniques.precision).
DTYPES = {
    "float16": np.float16, "float32": np.float32, "float64": np.float64,
    "int8": np.int8, "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16,
    "int32": np.int32, "int64": np.int64, "bool": np.bool_,
}

_cupy = None
_cupyx = None
_default = {"device": None}  # None: not set yet, read $TINYMEM_DEVICE on first use


class DeviceError(RuntimeError):
    """A device was asked for that does not exist or cannot be used here."""


def default_device():
    """The device used when none is given: the last :func:`set_default_device`, else
    ``$TINYMEM_DEVICE``, else ``"cpu"``."""
    if _default["device"] is None:
        return check_device(os.environ.get("TINYMEM_DEVICE", "cpu") or "cpu")
    return _default["device"]


get_default_device = default_device


def set_default_device(device):
    """Make ``device`` (``"cpu"`` or ``"cuda"``) where tensors, parameters, optimizer state, data
    and draws are made when no ``device=`` is given (``torch.set_default_device``). ``None``
    goes back to ``$TINYMEM_DEVICE``. Arrays already made stay where they are."""
    _default["device"] = None if device is None else check_device(device)


@contextlib.contextmanager
def default_device_as(device):
    """Inside the block, ``device`` is the default device; the previous one after it."""
    previous = _default["device"]
    set_default_device(device)
    try:
        yield check_device(device)
    finally:
        _default["device"] = previous


def check_device(device):
    """Return ``device`` as a canonical name, or raise :class:`DeviceError` saying which exist."""
    if device is None:
        return default_device()
    name = str(device).lower()
    if name.startswith("cuda:"):
        name = "cuda"
    if name not in DEVICES:
        raise DeviceError(f"unknown device {device!r}; tinymem knows {', '.join(DEVICES)}")
    if name == "cuda":
        get_cupy()
    return name


def use_cuda_module(module):
    """Test-only seam: serve ``module`` wherever tinymem asks for CuPy (its ``cupyx`` attribute
    stands for ``cupyx``). Returns the module it replaces, to pass back later; ``None`` goes back
    to importing the real CuPy on next use. Used by the tests' NumPy-backed stand-in."""
    global _cupy, _cupyx
    previous = _cupy
    _cupy, _cupyx = module, getattr(module, "cupyx", None)
    return previous


def _standin():
    """The tests' stand-in for CuPy, for a process started with ``TINYMEM_CUDA_STANDIN=1``."""
    import importlib.util
    import sys
    if "standin_cupy" in sys.modules:  # the tests imported it already: one module, one array class
        return sys.modules["standin_cupy"]
    path = pathlib.Path(__file__).resolve().parents[1] / "tests" / "standin_cupy.py"
    if not path.exists():
        raise DeviceError(f"TINYMEM_CUDA_STANDIN is set (a test-only switch), but {path} is missing: "
                          "unset it, or run from a checkout of the repository")
    spec = importlib.util.spec_from_file_location("standin_cupy", path)
    module = sys.modules["standin_cupy"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def get_cupy():
    """Import CuPy on first use; explain what is missing when it cannot work."""
    global _cupy
    if _cupy is not None:
        return _cupy
    if os.environ.get("TINYMEM_CUDA_STANDIN") == "1":
        use_cuda_module(_standin())
        return _cupy
    try:
        import cupy
    except ImportError as exc:
        raise DeviceError(
            "device 'cuda' needs CuPy, which is not installed: run `pip install .[gpu]` "
            "(cupy-cuda12x) on a machine with an NVIDIA GPU, or use device='cpu'"
        ) from exc
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver missing or broken: CuPy raises its own runtime errors
        raise DeviceError(f"CuPy is installed but no GPU is usable ({exc}); use device='cpu'") from exc
    if count == 0:
        raise DeviceError("CuPy is installed but this machine has no GPU; use device='cpu'")
    import cupyx
    use_cuda_module(cupy)
    globals()["_cupyx"] = cupyx
    return cupy


def get_cupyx():
    """``cupyx`` (scatter_add, pinned host arrays) of the CuPy in use."""
    get_cupy()
    return _cupyx


def cuda_available():
    """True when CuPy imports and sees at least one GPU."""
    try:
        get_cupy()
    except DeviceError:
        return False
    return True


def device_of(array):
    """``"cuda"`` for a CuPy array (anything with ``__cuda_array_interface__``), ``"cpu"`` otherwise."""
    if type(array) is np.ndarray or not hasattr(array, "__cuda_array_interface__"):
        return "cpu" if isinstance(array, (np.ndarray, np.generic)) else "cuda"
    return "cuda"


def array_module(x):
    """NumPy or CuPy: accepts a device name or an array."""
    if isinstance(x, str):
        return np if check_device(x) == "cpu" else get_cupy()
    if type(x) is np.ndarray:
        return np
    if hasattr(x, "__cuda_array_interface__"):
        return get_cupy()
    if isinstance(x, (np.ndarray, np.generic)):
        return np
    # A list or a Python number is no CUDA request: say what was given, not "needs CuPy".
    raise TypeError(f"expected a NumPy or CuPy array (or a Tensor), got {type(x).__name__}; "
                    "wrap it first, e.g. tm.tensor(x)")


def to_device(array, device):
    """Copy ``array`` to ``device`` (no copy when it is already there)."""
    device = check_device(device)
    if device == "cpu":
        if hasattr(array, "__cuda_array_interface__"):
            return get_cupy().asnumpy(array)
        return np.asarray(array)
    return get_cupy().asarray(array)


def to_numpy(array):
    """A NumPy array with the same values, from either backend: a NumPy or CuPy array, a Tensor
    (its values), a list or a number. Memory: one host copy of a device array, none otherwise."""
    if hasattr(array, "requires_grad"):  # a Tensor (not imported: autograd builds on this module)
        array = array.data
    if array is None:  # np.asarray(None) would be an object array holding None, read as values later
        raise TypeError("to_numpy: got None, not an array; pass the array (or Tensor) whose values you want")
    return to_device(array, "cpu")


def resolve_dtype(dtype):
    """Turn a dtype name, NumPy dtype or Python type into a NumPy dtype, or explain the choices."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        if dtype == "bfloat16":
            raise TypeError(
                "NumPy has no bfloat16 dtype; tinymem stores bfloat16 as uint16 bits: use "
                "tinymem.techniques.precision (float32_to_bfloat16_bits, half(model, 'bfloat16'))")
        if dtype not in DTYPES:
            raise TypeError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}")
        return np.dtype(DTYPES[dtype])
    try:
        resolved = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"unknown dtype {dtype!r}; choose one of {', '.join(DTYPES)}") from exc
    if resolved.name not in DTYPES:
        raise TypeError(f"unsupported dtype {resolved.name}; choose one of {', '.join(DTYPES)}")
    return resolved


def scatter_add(xp, target, index, values):
    """``target[index] += values`` with repeated indices summed (np.add.at / cupyx.scatter_add)."""
    if xp is np:
        np.add.at(target, index, values)
    else:
        get_cupyx().scatter_add(target, index, values)
    return target


# A chunk of 64K values keeps a loop's temporaries in a CPU's cache; on a GPU every pass over a
# chunk is a kernel launch of a few microseconds, so 64K-value chunks made half precision 10-14x
# and 8-bit Adam 138x slower there than whole arrays. 16M values: 64 MiB per float32 temporary.
GPU_CHUNK_ELEMENTS = 1 << 24


def chunk_elements(xp, cpu_default):
    """Values per chunk of a chunked loop on ``xp``'s device (an array module, or ``"cpu"`` /
    ``"cuda"`` for a planner): ``cpu_default`` (sized for the CPU's cache) on NumPy, at least
    :data:`GPU_CHUNK_ELEMENTS` on any other module (CuPy), where a chunk is most often a whole
    array. The one place where that choice is made; results never depend on it. Memory: a
    loop's temporaries grow with the chunk (e.g. 4 bytes per value each)."""
    return cpu_default if xp is np or xp == "cpu" else max(cpu_default, GPU_CHUNK_ELEMENTS)


def take(table, indices, out):
    """``out[...] = table[indices]`` for indices in range (a gather, exact on any device). NumPy
    copies ``out`` first unless told what to do out of range: ``mode="wrap"``, what CuPy's
    ``take`` (no ``mode``) always does."""
    if isinstance(table, np.ndarray):
        return table.take(indices, out=out, mode="wrap")
    return table.take(indices, out=out)
