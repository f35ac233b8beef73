"""The NumPy/CuPy switch.

A device is a name: ``"cpu"`` means NumPy arrays in host RAM, ``"cuda"`` means CuPy arrays
in GPU memory. Every op asks :func:`array_module` for the module that owns its inputs and
calls only functions that NumPy and CuPy share, so one code path serves both (DeZero's
``get_array_module``).

CuPy is imported only when a ``"cuda"`` device is asked for, so a CPU-only machine never
needs it. The default device comes from the ``TINYMEM_DEVICE`` environment variable
(``cpu`` when unset).

Memory cost: none; this module only routes.
"""
import os

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


class DeviceError(RuntimeError):
    """A device was asked for that does not exist or cannot be used here."""


def default_device():
    """The device used when none is given: ``$TINYMEM_DEVICE`` or ``"cpu"``."""
    return check_device(os.environ.get("TINYMEM_DEVICE", "cpu"))


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


def get_cupy():
    """Import CuPy on first use; explain what is missing when it cannot work."""
    global _cupy
    if _cupy is not None:
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
    _cupy = cupy
    return cupy


def cuda_available():
    """True when CuPy imports and sees at least one GPU."""
    try:
        get_cupy()
    except DeviceError:
        return False
    return True


def device_of(array):
    """``"cuda"`` for a CuPy array, ``"cpu"`` otherwise."""
    return "cpu" if isinstance(array, (np.ndarray, np.generic)) else "cuda"


def array_module(x):
    """NumPy or CuPy: accepts a device name or an array."""
    if isinstance(x, str):
        return np if check_device(x) == "cpu" else get_cupy()
    if isinstance(x, (np.ndarray, np.generic)):
        return np
    if not hasattr(x, "__cuda_array_interface__"):
        # A list or a Python number is no CUDA request: say what was given, not "needs CuPy".
        raise TypeError(f"expected a NumPy or CuPy array (or a Tensor), got {type(x).__name__}; "
                        "wrap it first, e.g. tm.tensor(x)")
    return get_cupy()


def to_device(array, device):
    """Copy ``array`` to ``device`` (no copy when it is already there)."""
    device = check_device(device)
    if device == "cpu":
        if isinstance(array, np.ndarray):
            return array
        if device_of(array) == "cuda":
            return get_cupy().asnumpy(array)
        return np.asarray(array)
    return get_cupy().asarray(array)


def to_numpy(array):
    """A NumPy array with the same values, from either backend."""
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
        import cupyx
        cupyx.scatter_add(target, index, values)
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
