"""A NumPy-backed stand-in for CuPy: a second device, "cuda", in every CI run without a GPU.

Why: tinymem's one code path serves NumPy and CuPy, and the commonest GPU bug is a NumPy array
made where a device array was meant (a parameter, a label, an optimizer state), or a device
array handed to something that reads host memory (matplotlib, ``json``, ``np.testing``), which
only a second device reveals. ``backend.use_cuda_module(standin_cupy)`` (or
``TINYMEM_CUDA_STANDIN=1``) serves this module wherever tinymem asks for CuPy; the ``device``
fixture's ``standin`` param does that for one test.

What it imitates, and how:

- **Arrays** are :class:`ndarray`, a wrapper that holds a NumPy array and is NOT a
  ``numpy.ndarray`` (``isinstance(x, np.ndarray)`` is False, as for a CuPy array, so CuPy's
  branches of tinymem run in CI). It carries ``__cuda_array_interface__``, so
  ``backend.device_of`` calls it "cuda". It is as strict as CuPy:
  ``np.asarray``/``np.array``/``np.testing``/matplotlib on it raise CuPy's ``TypeError``
  ("Implicit conversion to a NumPy array is not allowed..."); a NumPy array as an operand, an
  index, an ``out=`` or a value to store raises ``TypeError: Unsupported type <class
  'numpy.ndarray'>``; integer indexing and reductions give 0-d device arrays; it has no
  ``__index__`` and no ``__round__``. Python and NumPy scalars are fine. ``asarray`` copies a
  NumPy array over; ``asnumpy``, ``.get()``, ``.item()``, ``float()`` are the ways back.
- **One dispatch**: every device operation (a method, an operator, a module function, a NumPy
  function or ufunc called on device arrays, ``linalg``, ``random``, ``cupyx.scatter_add``)
  passes through :func:`dispatch`, and every device-to-host read through :func:`to_host`:
  the places to count kernel launches and host syncs.
- **Views**: a view's ``base`` is the device array that owns the buffer, as in CuPy; a fresh
  result owns its memory (so the ledger, the pool and ``gc`` see one owner).
- **Flush to zero**, as CuPy's float32 kernels do on a GPU: float32 inputs and outputs of an
  arithmetic ufunc or reduction that are subnormal (below 1.18e-38) become ±0, so
  ``1e-40 * 1`` is 0. Copies, ``astype`` and ``view`` stay exact, as on a GPU. float16
  arithmetic runs through float32 there, where every float16 subnormal (6e-8 and up) is a
  normal number: it survives.
- **The memory pool** counts every owning device array, rounded up to 512 B as CuPy's pool
  rounds: ``used_bytes()``, ``total_bytes()`` (used plus cached free blocks of the same sizes),
  ``free_all_blocks()``, ``set_limit(size=, fraction=)`` / ``get_limit()`` (an allocation over
  the limit raises :class:`OutOfMemoryError`, CuPy's message), and ``cuda.MemoryHook`` context
  managers called with CuPy's keyword names: ``malloc_*`` and ``free_*`` for every pool
  allocation and release, ``alloc_*`` only when the pool grows.
- **Kernel launches and host syncs are counted** inside ``with counting() as counts:``
  (``counts.launches``, ``counts.syncs``, ``counts.generators``, ``counts.report()`` naming the
  line of each), hooked into :func:`dispatch` and :func:`to_host`; the rules are in
  ``tests/standin_counting.py``. Budgets on both are ordinary tests.
- **Scatters** (``cupyx.scatter_add``, ``add.at``) take CuPy 13's dtypes only.

Streams and events are no-ops: everything runs in order on the host.
"""
import contextlib
import importlib.util
import pathlib
import sys
import types
import weakref

import numpy as np


def _load_counting():
    """``tests/standin_counting.py``, found beside this file (the stand-in may be loaded by path)."""
    module = sys.modules.get("standin_counting")
    if module is None:
        spec = importlib.util.spec_from_file_location("standin_counting",
                                                      pathlib.Path(__file__).with_name("standin_counting.py"))
        module = sys.modules["standin_counting"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module


_count = _load_counting()
Counts, counting = _count.Counts, _count.counting
_in_kernel = [0]  # > 0 while a fused kernel's Python body runs


@contextlib.contextmanager
def fused_kernel(name):
    """``with fused_kernel(name):`` around the ufuncs of one fused kernel's Python body
    (``tinymem.fused``): one launch, and no pool memory for the body's temporaries, which live
    in registers in the kernel CuPy compiles from it (its outputs are written in place)."""
    with _count.fused_kernel(name):
        _in_kernel[0] += 1
        try:
            yield
        finally:
            _in_kernel[0] -= 1

__version__ = "standin"
_plain = np.ndarray
_TINY32 = np.finfo(np.float32).tiny
DEVICE_BYTES = 16 << 30  # the stand-in GPU's memory, for set_limit(fraction=) and mem_info
# Ufuncs that are not arithmetic on a GPU: comparisons, classification and logic read the bits.
_EXACT = {np.isnan, np.isinf, np.isfinite, np.signbit, np.equal, np.not_equal, np.less,
          np.less_equal, np.greater, np.greater_equal, np.logical_and, np.logical_or,
          np.logical_not, np.logical_xor}
# Functions and methods (not ufuncs) that compute in float32 kernels, so flush like ufuncs.
_ARITHMETIC = {"sum", "mean", "prod", "cumsum", "cumprod", "dot", "vdot", "inner", "outer",
               "tensordot", "einsum", "std", "var", "average", "norm"}
_SCALARS = (bool, int, float, complex, np.generic)
IMPLICIT = ("Implicit conversion to a NumPy array is not allowed. "
            "Please use `.get()` to construct a NumPy array explicitly.")


class OutOfMemoryError(MemoryError):
    """CuPy's ``cupy.cuda.memory.OutOfMemoryError``, with its message."""

    def __init__(self, size, total, limit=0):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes, "
                         f"limit set to: {limit:,} bytes).")


def _refuse(value):
    raise TypeError(f"Unsupported type {type(value)}: the stand-in for CuPy does not mix device "
                    "arrays with NumPy arrays (CuPy refuses them too); copy with asarray/asnumpy")


def _unwrap(value):
    """Device arrays become their NumPy arrays; NumPy arrays are refused; containers recurse."""
    if type(value) is ndarray:
        return value._a
    if isinstance(value, _plain):
        _refuse(value)
    if type(value) in (list, tuple):
        return type(value)(_unwrap(v) for v in value)
    if type(value) is dict:
        return {k: _unwrap(v) for k, v in value.items()}
    return value


_OWNERS = {}  # id(NumPy buffer) -> weakref to the device array that owns it


def _own(buffer):
    """A device array owning ``buffer`` (a NumPy array with no base): counted by the pool."""
    array = object.__new__(ndarray)
    array._a, array.base = buffer, None
    if not _in_kernel[0]:
        POOL.adopt(array)
    key = id(buffer)
    _OWNERS[key] = weakref.ref(array, lambda ref: _OWNERS.get(key) is ref and _OWNERS.pop(key))
    return array


def _wrap(value, inputs=()):
    """A result as device arrays; scalars become 0-d. An input handed back (``out=``) is that
    input; a view of a device buffer is a view whose ``base`` is the owner, as in CuPy; a view
    of a host temporary is copied so that the device array owns its memory."""
    if isinstance(value, _plain):
        for given in inputs:
            if type(given) is ndarray and given._a is value:
                return given
        root, up = value, value.base
        while up is not None:  # through as_strided's helper objects too
            if isinstance(up, _plain):
                root = up
            up = getattr(up, "base", None)
        ref = _OWNERS.get(id(root))
        owner = ref() if ref is not None else None
        if owner is not None and owner._a is root:
            if value is root:
                return owner
            view = object.__new__(ndarray)
            view._a, view.base = value, owner
            return view
        return _own(value if value.base is None else value.copy(order="K"))
    if isinstance(value, np.generic):
        return _own(np.array(value))
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # linalg's namedtuples
        return type(value)(*(_wrap(v, inputs) for v in value))
    if type(value) in (list, tuple):
        return type(value)(_wrap(v, inputs) for v in value)
    return value


def _subnormal(array):
    """Where a float32 array holds subnormals, or None when it holds none (or is no float32)."""
    if not isinstance(array, _plain) or array.dtype != np.float32:
        return None
    size = np.abs(array)
    sub = (size < _TINY32) & (size > 0)
    return sub if sub.any() else None


def _flushed(array):
    """``array`` with its float32 subnormals made ±0 (a copy only when there are any)."""
    sub = _subnormal(array)
    return array if sub is None else np.where(sub, np.copysign(np.float32(0), array), array)


def _flushes(func):
    """Whether ``func`` runs as float32 arithmetic on a GPU (so it flushes subnormals)."""
    ufunc = func if isinstance(func, np.ufunc) else getattr(func, "__self__", None)
    if isinstance(ufunc, np.ufunc):
        return ufunc not in _EXACT and func.__name__ != "at"
    return getattr(func, "__name__", "") in _ARITHMETIC


def dispatch(func, args, kwargs=None):
    """Run one device operation: ``func`` (a NumPy function, ufunc or method) on the NumPy
    arrays inside the device arrays ``args``/``kwargs``, results back on the device.

    Every device operation of the stand-in passes through here, counted as one kernel launch
    unless it only views an input (see ``standin_counting``). NumPy arrays among the operands
    are refused before NumPy sees them."""
    kwargs = kwargs or {}
    inputs = list(args)
    for value in kwargs.values():
        inputs.extend(value if type(value) is tuple else (value,))
    plain_args, plain_kwargs = _unwrap(tuple(args)), _unwrap(kwargs)
    if getattr(func, "__self__", None) is np.add and func.__name__ == "at":
        _check_scatter(plain_args[0])
    if not _count.active():
        return _run(func, plain_args, plain_kwargs, inputs)
    if _sized_on_host(func, plain_args):
        _count.record("sync")

    def is_view(result):
        return "out" not in kwargs and type(result) is ndarray and (
            result.base is not None or any(result is given for given in inputs))
    return _count.launched(func, lambda: _run(func, plain_args, plain_kwargs, inputs), is_view)


# Operations whose result's size depends on the values: CuPy reads that size on the host before
# it can allocate the result, a host sync each (as torch.nonzero or a boolean mask on CUDA).
SIZED_ON_HOST = {"nonzero", "flatnonzero", "argwhere", "unique", "extract", "compress"}


def _sized_on_host(func, plain_args):
    """Whether ``func`` on ``plain_args`` must read its output's size on the host: one of
    :data:`SIZED_ON_HOST`, or ``a[mask]`` with a boolean mask."""
    if getattr(func, "__name__", "") in SIZED_ON_HOST:
        return True
    if func is not _getitem:
        return False
    key = plain_args[1] if type(plain_args[1]) is tuple else (plain_args[1],)
    return any(isinstance(k, np.ndarray) and k.dtype == bool for k in key)


def _run(func, plain_args, plain_kwargs, inputs):
    """``func`` on NumPy arrays, flushing float32 subnormals as a GPU's arithmetic does."""
    flush = _flushes(func)
    if flush:
        plain_args = tuple(_flushed(a) for a in plain_args)
    result = _wrap(func(*plain_args, **plain_kwargs), inputs)
    if flush:
        for r in result if isinstance(result, tuple) else (result,):
            if type(r) is ndarray:
                sub = _subnormal(r._a)
                if sub is not None:
                    np.copyto(r._a, np.copysign(np.float32(0), r._a), where=sub)
    return result


def to_host(array):
    """A NumPy copy of a device array: every device-to-host read of the stand-in (``get``,
    ``asnumpy``, ``item``, ``tolist``, ``float``, ``int``, ``bool``, ``repr``) passes through
    here, each one host sync."""
    _count.record("sync")
    return array._a.copy()


def from_host(obj, dtype=None, order="K", ndmin=0):
    """A device array holding a copy of host data (NumPy arrays, lists, scalars): every
    host-to-device copy of the stand-in passes through here."""
    if type(obj) in (list, tuple) and any(type(v) is ndarray for v in obj):
        return dispatch(np.array, (list(obj),), {"dtype": dtype, "ndmin": ndmin})
    return _own(np.array(obj, dtype=dtype, order=order, ndmin=ndmin, copy=True))


def _getitem(a, key):
    """``a[key]``; an integer index gives a 0-d view, as in CuPy (NumPy gives a scalar)."""
    result = a[key]
    if isinstance(result, np.generic):
        result = a[(key if type(key) is tuple else (key,)) + (Ellipsis,)]
    return result


def _setitem(a, key, value):
    a[key] = value


def _take(a, indices, axis=None, out=None):
    """CuPy's ``take``: no ``mode``; an index out of range wraps around."""
    return np.take(a, indices, axis=axis, out=out, mode="wrap")


def _binary(ufunc, reflected=False, inplace=False):
    def operator_(self, other):
        if type(other) is not ndarray and not isinstance(other, _SCALARS + (_plain,)):
            return NotImplemented
        if inplace:
            return dispatch(ufunc, (self, other), {"out": (self,)})
        return dispatch(ufunc, (other, self) if reflected else (self, other))
    return operator_


class ndarray:
    """A device array of the stand-in: a NumPy array inside, refused wherever CuPy refuses."""

    __slots__ = ("_a", "base", "__weakref__")
    __hash__ = None

    def __new__(cls, shape, dtype=float, memptr=None, strides=None, order="C"):
        return _own(np.empty(shape, dtype, order=order))

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    itemsize = property(lambda self: self._a.itemsize)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: dispatch(_plain.transpose, (self,)))

    @property
    def __cuda_array_interface__(self):
        face = self._a.__array_interface__
        return {"shape": face["shape"], "typestr": face["typestr"], "data": face["data"],
                "strides": face.get("strides"), "version": 3}

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self._a.__array_interface__["data"][0])

    @property
    def device(self):
        return cuda.Device(0)

    def __array__(self, dtype=None, copy=None):
        raise TypeError(IMPLICIT)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return dispatch(getattr(ufunc, method), inputs, kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        return dispatch(func, args, kwargs)

    def __getattr__(self, name):
        """Every other NumPy method, run on the device (``sum``, ``astype``, ``reshape``...)."""
        if name.startswith("__") or name in ("_a", "base"):
            raise AttributeError(name)
        method = getattr(_plain, name, None)
        if name in ("reshape", "transpose"):  # CuPy reads a shape or axes given as a NumPy array
            return lambda *args, **kwargs: dispatch(method, (self,) + tuple(
                tuple(a.tolist()) if isinstance(a, _plain) else a for a in args), kwargs)
        if callable(method):
            return lambda *args, **kwargs: dispatch(method, (self,) + args, kwargs)
        return _wrap(getattr(self._a, name), (self,))  # real, imag: views

    def take(self, indices, axis=None, out=None):
        return dispatch(_take, (self, indices, axis, out))

    def get(self, stream=None, order="C", out=None, blocking=True):
        """A NumPy copy, or a copy into ``out`` (CuPy's ``ndarray.get``)."""
        return asnumpy(self, out=out)

    def set(self, arr, stream=None):
        """Copy a NumPy array in (CuPy's ``ndarray.set``)."""
        self._a[...] = arr

    def item(self, *args):
        return to_host(self).item(*args)

    def tolist(self):
        return to_host(self).tolist()

    def tobytes(self, order="C"):
        return to_host(self).tobytes(order)

    def __getitem__(self, key):
        return dispatch(_getitem, (self, key))

    def __setitem__(self, key, value):
        dispatch(_setitem, (self, key, value))

    def __len__(self):
        if not self._a.ndim:
            raise TypeError("len() of unsized object")
        return self._a.shape[0]

    def __iter__(self):
        if not self._a.ndim:
            raise TypeError("iteration over a 0-d array")
        return (self[i] for i in range(self._a.shape[0]))

    def __bool__(self):
        return bool(to_host(self))

    def __float__(self):
        return float(to_host(self).item() if self._a.size == 1 else to_host(self))

    def __int__(self):
        return int(to_host(self).item() if self._a.size == 1 else to_host(self))

    def __complex__(self):
        return complex(to_host(self).item())

    def __format__(self, spec):
        return format(to_host(self), spec)

    def __repr__(self):
        return repr(to_host(self))

    def __str__(self):
        return str(to_host(self))

    def __copy__(self):
        return self.copy()

    def __deepcopy__(self, memo):
        return self.copy()

    def __reduce__(self):
        return asarray, (self.get(),)

    __neg__ = lambda self: dispatch(np.negative, (self,))  # noqa: E731
    __pos__ = lambda self: dispatch(np.positive, (self,))  # noqa: E731
    __abs__ = lambda self: dispatch(np.absolute, (self,))  # noqa: E731
    __invert__ = lambda self: dispatch(np.invert, (self,))  # noqa: E731


for _name, _ufunc in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("matmul", np.matmul),
                      ("truediv", np.true_divide), ("floordiv", np.floor_divide), ("mod", np.remainder),
                      ("pow", np.power), ("and", np.bitwise_and), ("or", np.bitwise_or),
                      ("xor", np.bitwise_xor), ("lshift", np.left_shift), ("rshift", np.right_shift)):
    setattr(ndarray, f"__{_name}__", _binary(_ufunc))
    setattr(ndarray, f"__r{_name}__", _binary(_ufunc, reflected=True))
    setattr(ndarray, f"__i{_name}__", _binary(_ufunc, inplace=True))
for _name, _ufunc in (("lt", np.less), ("le", np.less_equal), ("eq", np.equal), ("ne", np.not_equal),
                      ("gt", np.greater), ("ge", np.greater_equal)):
    setattr(ndarray, f"__{_name}__", _binary(_ufunc))


class _Pool:
    """CuPy's default memory pool, counted: blocks rounded up to 512 B, freed blocks cached."""

    def __init__(self):
        self.used, self.cached, self.limit, self.hooks = 0, {}, 0, []

    def adopt(self, buffer):
        size = buffer.nbytes
        if size == 0:
            return
        mem_size = -(-size // 512) * 512
        ptr, pmem_id = buffer._a.__array_interface__["data"][0], id(buffer)
        self._call("malloc_preprocess", device_id=0, size=size, mem_size=mem_size)
        if self.cached.get(mem_size):
            self.cached[mem_size] -= 1
        else:
            if self.limit and self.total_bytes() + mem_size > self.limit:
                self.free_all_blocks()
                if self.used + mem_size > self.limit:
                    raise OutOfMemoryError(mem_size, self.used, self.limit)
            self._call("alloc_preprocess", device_id=0, mem_size=mem_size)
            self._call("alloc_postprocess", device_id=0, mem_size=mem_size, mem_ptr=ptr)
        self.used += mem_size
        self._call("malloc_postprocess", device_id=0, size=size, mem_size=mem_size, mem_ptr=ptr,
                   pmem_id=pmem_id)
        weakref.finalize(buffer, self._release, mem_size, ptr, pmem_id)

    def _release(self, mem_size, ptr, pmem_id):
        self._call("free_preprocess", device_id=0, mem_size=mem_size, mem_ptr=ptr, pmem_id=pmem_id)
        self.used -= mem_size
        self.cached[mem_size] = self.cached.get(mem_size, 0) + 1
        self._call("free_postprocess", device_id=0, mem_size=mem_size, mem_ptr=ptr, pmem_id=pmem_id)

    def _call(self, event, **kwargs):
        for hook in list(self.hooks):
            getattr(hook, event)(**kwargs)

    def used_bytes(self):
        return self.used

    def free_bytes(self):
        return sum(size * n for size, n in self.cached.items())

    def total_bytes(self):
        return self.used + self.free_bytes()

    def free_all_blocks(self):
        self.cached.clear()

    def set_limit(self, size=None, fraction=None):
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at one time")
        self.limit = int(fraction * DEVICE_BYTES) if fraction is not None else int(size or 0)

    def get_limit(self):
        return self.limit


POOL = _Pool()


def get_default_memory_pool():
    return POOL


class _Ufunc:
    """A NumPy ufunc as a stand-in module attribute (``xp.add``, ``xp.add.at``): on the device."""

    def __init__(self, ufunc):
        self.ufunc = ufunc

    def __call__(self, *args, **kwargs):
        return dispatch(self.ufunc, args, kwargs)

    def __getattr__(self, name):
        method = getattr(self.ufunc, name)
        if not callable(method):
            return method
        return lambda *args, **kwargs: dispatch(method, args, kwargs)


def _on_device(func):
    """A NumPy function as a stand-in module function: device operands only, results on the device."""
    return lambda *args, **kwargs: dispatch(func, args, kwargs)


def asarray(a, dtype=None, order=None):
    """On the device: device arrays as they are (cast if asked), anything else copied over."""
    if type(a) is ndarray:
        return a if dtype is None or a.dtype == np.dtype(dtype) else a.astype(dtype)
    return from_host(a, dtype=dtype, order=order or "K")


def array(obj, dtype=None, copy=True, order="K", ndmin=0):
    """A device array of ``obj`` (CuPy's ``cupy.array``: a copy unless ``copy=False`` allows none)."""
    if type(obj) is ndarray:
        if not copy and (dtype is None or obj.dtype == np.dtype(dtype)) and obj.ndim >= ndmin:
            return obj
        return dispatch(np.array, (obj,), {"dtype": dtype, "copy": True, "order": order, "ndmin": ndmin})
    return from_host(obj, dtype=dtype, order=order, ndmin=ndmin)


def asnumpy(a, stream=None, out=None):
    """A NumPy copy of a device array (NumPy arrays are returned as they are, as CuPy does)."""
    result = to_host(a) if type(a) is ndarray else np.asarray(a)
    if out is not None:
        out[...] = result
        return out
    return result


take = _on_device(_take)
_found = {}  # not globals(): xp.any, xp.sum, xp.abs would hide the builtins of this file


def __getattr__(name):
    """Every other name of NumPy: dtypes and constants as they are, functions on the device.
    NumPy's submodules are not served (``np.testing`` would take device arrays): what CuPy
    has of them is below (``linalg``, ``random``, ``lib.stride_tricks``)."""
    value = _found.get(name)
    if value is None:
        value = getattr(np, name)
        if isinstance(value, types.ModuleType):
            raise AttributeError(f"the stand-in for CuPy has no {name!r} (add what CuPy has of numpy.{name})")
        if isinstance(value, np.ufunc):
            value = _Ufunc(value)
        elif callable(value) and not isinstance(value, type):
            value = _on_device(value)
        _found[name] = value
    return value


class _Generator:
    """``cupy.random.Generator``: NumPy's, drawing onto the device."""

    def __init__(self, seed):
        self.numpy = np.random.default_rng(seed)

    def __getattr__(self, name):
        return _on_device(getattr(self.numpy, name))


def _default_rng(seed=None):
    """``cupy.random.default_rng``: counted, as building a generator on a GPU seeds its state."""
    _count.record("generator")
    return _Generator(seed)


random = types.SimpleNamespace(default_rng=_default_rng)
linalg = types.SimpleNamespace(**{name: _on_device(getattr(np.linalg, name))
                                  for name in ("norm", "svd", "qr", "inv", "solve", "eigh")})
lib = types.SimpleNamespace(stride_tricks=types.SimpleNamespace(
    as_strided=_on_device(np.lib.stride_tricks.as_strided)))


class _Stream:
    """Streams and events: everything already runs in order on the host."""

    ptr = 0
    done = True

    def __init__(self, non_blocking=False, null=False):
        self.non_blocking = non_blocking

    def record(self, event=None):
        return event or _Stream()

    def wait_event(self, event):
        pass

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class _Device:
    def __init__(self, device=0):
        self.id = int(device)

    def synchronize(self):
        pass

    def use(self):
        pass

    @property
    def mem_info(self):
        return DEVICE_BYTES - POOL.total_bytes(), DEVICE_BYTES


class MemoryHook:
    """``cupy.cuda.MemoryHook``: a context manager whose methods the pool calls by keyword."""

    name = "MemoryHook"

    def __enter__(self):
        if any(h.name == self.name for h in POOL.hooks):
            raise RuntimeError(f"hook {self.name} already exists")
        POOL.hooks.append(self)
        return self

    def __exit__(self, *exc):
        POOL.hooks.remove(self)

    def alloc_preprocess(self, **kwargs):
        pass

    def alloc_postprocess(self, **kwargs):
        pass

    def malloc_preprocess(self, **kwargs):
        pass

    def malloc_postprocess(self, **kwargs):
        pass

    def free_preprocess(self, **kwargs):
        pass

    def free_postprocess(self, **kwargs):
        pass


_runtime = types.SimpleNamespace(
    getDeviceCount=lambda: 1,
    getDeviceProperties=lambda device: {"name": b"tinymem stand-in for CuPy (NumPy)",
                                        "totalGlobalMem": DEVICE_BYTES})
cuda = types.SimpleNamespace(
    Device=_Device, Stream=_Stream, Event=_Stream, MemoryHook=MemoryHook, runtime=_runtime,
    get_current_stream=lambda: _Stream(), memory=types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError))


# CuPy 13's atomic add (``cupy.add.at``, ``cupyx.scatter_add``) takes these dtypes only (13.6
# source); int64 and the rest came with CuPy 14. The stand-in refuses the others, as CuPy 13 does.
_SCATTER_DTYPES = {np.dtype(t) for t in (np.int32, np.uint32, np.uint64, np.float16, np.float32, np.float64)}


def _check_scatter(a):
    if a.dtype not in _SCATTER_DTYPES:
        raise TypeError(f"Unsupported dtype {a.dtype} for scatter_add/add.at (CuPy 13 takes "
                        f"{', '.join(sorted(str(t) for t in _SCATTER_DTYPES))})")


def _scatter_add(a, slices, value):
    """``cupyx.scatter_add``: ``a[slices] += value`` with repeated indices summed."""
    dispatch(np.add.at, (a, slices, value))


def _empty_pinned(shape, dtype=np.float64):
    """``cupyx.empty_pinned``: pinned host memory is a NumPy array."""
    return np.empty(shape, dtype)


cupyx = types.SimpleNamespace(scatter_add=_scatter_add, empty_pinned=_empty_pinned)


@contextlib.contextmanager
def installed():
    """Serve this module as CuPy inside the block (and the previous one after)."""
    from tinymem import backend
    previous = backend.use_cuda_module(sys.modules[__name__])
    try:
        yield
    finally:
        backend.use_cuda_module(previous)
