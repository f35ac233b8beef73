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
import contextvars
import os
import pathlib
import threading

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
_cupyx_of = {}  # id(module) -> (module, its cupyx): what use_cuda_module gives back on restore
# set_default_device's choice, the one every thread starts with; None: read $TINYMEM_DEVICE.
_process = {"device": None}


# This thread's (and this asyncio task's) default_device_as choice, as (thread id, device).
# A context variable, not a thread-local: two asyncio tasks whose blocks interleave in one
# thread each keep their own (a thread-local gave one task the other's device and left the
# last one entered in force after both). The thread id keeps a block out of threads started
# inside it, on any Python (3.14's free-threaded builds start a thread with a copy of its
# starter's context).
_block = contextvars.ContextVar("tinymem_default_device", default=(None, None))


def _block_device():
    """This thread's and task's :func:`default_device_as` device, or None outside any block."""
    thread, device = _block.get()
    return device if thread == threading.get_ident() else None


class DeviceError(RuntimeError):
    """A device was asked for that does not exist or cannot be used here."""


def default_device():
    """The device used when none is given: this thread's :func:`default_device_as` block, else
    the last :func:`set_default_device`, else ``$TINYMEM_DEVICE``, else ``"cpu"``."""
    device = _block_device() or _process["device"]
    if device is not None:
        return device
    variable = os.environ.get("TINYMEM_DEVICE", "")
    try:
        return check_device(variable or "cpu")
    except DeviceError as exc:  # the caller gave no name: say where this one came from
        raise DeviceError(f"the default device comes from TINYMEM_DEVICE={variable!r}, which cannot "
                          f"be used: {exc}. Set TINYMEM_DEVICE to cpu or cuda, or unset it") from exc


get_default_device = default_device


def set_default_device(device):
    """Make ``device`` (``"cpu"`` or ``"cuda"``) where tensors, parameters, optimizer state, data
    and draws are made when no ``device=`` is given (``torch.set_default_device``). ``None``
    goes back to ``$TINYMEM_DEVICE``. Arrays already made stay where they are.

    The choice is the process's: every thread without a :func:`default_device_as` block of its
    own uses it, threads started later included. PyTorch keeps ``torch.set_default_device``
    per thread (in torch 2.13 a thread started after ``set_default_device("meta")`` still makes
    CPU tensors); tinymem does not, so that a data-loading thread, or the threads tinymem runs
    itself, make their arrays where the program said. Called inside a block, it takes effect
    in this thread at once and outlasts the block."""
    resolved = None if device is None else check_device(device)
    _process["device"] = resolved
    _block.set((None, None))


@contextlib.contextmanager
def default_device_as(device):
    """Inside the block, ``device`` is this thread's default device; the previous one after
    it. Per thread, as ``with torch.device(...)``: another thread's default does not change,
    and two threads' blocks may interleave in any order. A thread started inside the block
    starts with the process's default (:func:`set_default_device`), not this block's; an
    asyncio task's block is its own, as a thread's is. A generator that yields inside a block
    leaves the block's device in force for its caller until it is resumed past the block or
    closed (as ``with torch.device(...)`` does): end the block before ``yield``."""
    resolved = check_device(device)
    previous = _block.get()
    _block.set((threading.get_ident(), resolved))
    try:
        yield resolved
    finally:  # set, not Token.reset: a generator's block may end in another context than it began
        _block.set(previous)


def check_device(device):
    """The one parser of device names: return ``device`` as a canonical name (``"cpu"`` or
    ``"cuda"``), or raise :class:`DeviceError` saying what exists.

    ``"cuda:N"`` names a GPU by index, as in PyTorch. tinymem uses one GPU per process, CuPy's
    current one (chosen with ``CUDA_VISIBLE_DEVICES`` or ``cupy.cuda.Device(N).use()``), so N
    must be that GPU's index: any other index, one past the machine's GPUs, or one that is not
    a whole number is refused rather than read as the current GPU."""
    if device is None:
        return default_device()
    name, colon, index = str(device).strip().lower().partition(":")
    if name not in DEVICES:
        raise DeviceError(f"unknown device {device!r}; tinymem knows {', '.join(DEVICES)} "
                          "(and 'cuda:N' for the GPU with index N)")
    if colon and name == "cpu":
        raise DeviceError(f"device {device!r}: the CPU has no index; use 'cpu'")
    if name == "cuda":
        cupy = get_cupy()
        if colon:
            _check_gpu_index(cupy, device, index)
    return name


def device_or_dtype(device, dtype):
    """``(device, dtype)`` of a ``to(device, dtype)`` call, whose first argument may be a dtype
    instead, as in PyTorch (``t.to("float16")``, ``t.to(np.float16)``, ``model.to(np.float16)``).
    A string that is neither a device's nor a dtype's name is refused here, saying both lists."""
    if isinstance(device, str) and device.partition(":")[0].strip().lower() not in DEVICES:
        if device not in DTYPES and device != "bfloat16":  # bfloat16: resolve_dtype says where it is
            raise DeviceError(f"to({device!r}): that is neither a device ({', '.join(DEVICES)}, 'cuda:N') "
                              f"nor a dtype ({', '.join(DTYPES)})")
        if dtype is not None:
            raise TypeError(f"to({device!r}, dtype={dtype!r}) names two dtypes; give one")
        return None, device
    if dtype is None and isinstance(device, (np.dtype, type)):  # np.float16, np.dtype("int8"), float
        return None, device
    return device, dtype


def _check_gpu_index(cupy, device, index):
    """Refuse ``cuda:N`` unless N is a whole number naming the GPU this process uses."""
    if not (index.isascii() and index.isdigit()):  # '²' and '٠' are digits to str.isdigit
        raise DeviceError(f"device {device!r}: the index after 'cuda:' must be a whole number >= 0, "
                          "e.g. 'cuda:0'; or use 'cuda' for the current GPU")
    count, current = cupy.cuda.runtime.getDeviceCount(), cupy.cuda.Device().id
    if int(index) >= count:
        raise DeviceError(f"device {device!r}: this machine has {count} GPU(s), cuda:0 to "
                          f"cuda:{count - 1}; use 'cuda' for the current one")
    if int(index) != current:
        raise DeviceError(f"device {device!r}: tinymem uses one GPU per process, the current one "
                          f"(cuda:{current}); to use GPU {int(index)}, start the process with "
                          f"CUDA_VISIBLE_DEVICES={int(index)} and name 'cuda'")


def use_cuda_module(module):
    """Test-only seam: serve ``module`` wherever tinymem asks for CuPy (its ``cupyx`` attribute
    stands for ``cupyx``). Returns the module it replaces, to pass back later; ``None`` goes back
    to importing the real CuPy on next use. Used by the tests' NumPy-backed stand-in.

    The module replaced keeps its ``cupyx``: the real ``cupy`` module has no ``cupyx``
    attribute, so restoring it by ``getattr`` alone lost ``cupyx`` (scatter_add, pinned
    memory) for the rest of the process."""
    global _cupy, _cupyx
    previous = _cupy
    if previous is not None:
        _cupyx_of[id(previous)] = (previous, _cupyx)
    paired = _cupyx_of.get(id(module), (None, None))
    _cupy = module
    _cupyx = getattr(module, "cupyx", None) or (paired[1] if paired[0] is module else None)
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
