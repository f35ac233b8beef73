"""A NumPy-backed stand-in for CuPy: a second device, "cuda", in every CI run without a GPU.

Why: tinymem's one code path serves NumPy and CuPy, and the commonest GPU bug is a NumPy array
made where a device array was meant (a parameter, a label, an optimizer state), which only a
second device reveals. ``backend.use_cuda_module(standin_cupy)`` (or ``TINYMEM_CUDA_STANDIN=1``)
serves this module wherever tinymem asks for CuPy; the ``device`` fixture's ``standin`` param
does that for one test.

What it imitates, and how:

- **Arrays** are :class:`ndarray`, a ``numpy.ndarray`` subclass carrying
  ``__cuda_array_interface__``, so ``backend.device_of`` calls them "cuda". Their ufuncs and
  array functions REFUSE plain NumPy arrays as operands (``TypeError: Unsupported type
  <class 'numpy.ndarray'>``, as CuPy does); Python and NumPy scalars are fine. Results stay
  stand-in arrays, and a reduction to a scalar gives a 0-d array, as on CuPy. The module's own
  functions (``xp.zeros``, ``xp.concatenate``, ``xp.exp``, ...) refuse NumPy arrays the same way;
  only ``asarray`` copies one over, as ``cupy.asarray`` does, and ``asnumpy`` copies back.
- **Flush to zero**, as CuPy's float32 kernels do on a GPU: float32 inputs and outputs of an
  arithmetic ufunc that are subnormal (below 1.18e-38) become ±0, so ``1e-40 * 1`` is 0.
  Copies, ``astype`` and ``view`` stay exact, as on a GPU. float16 arithmetic runs through
  float32 there, where every float16 subnormal (6e-8 and up) is a normal number: it survives.
- **The memory pool** counts every live stand-in buffer, rounded up to 512 B as CuPy's pool
  rounds: ``used_bytes()``, ``total_bytes()`` (used plus cached free blocks of the same sizes),
  ``free_all_blocks()``, ``set_limit(size=, fraction=)`` / ``get_limit()`` (an allocation over
  the limit raises :class:`OutOfMemoryError`, CuPy's message), and ``cuda.MemoryHook`` context
  managers called with CuPy's keyword names: ``malloc_*`` and ``free_*`` for every pool
  allocation and release, ``alloc_*`` only when the pool grows.

What it does not catch: ``np.asarray(x)`` on a stand-in array quietly gives a NumPy view (a
subclass cannot refuse it; CuPy raises), and indexing with a NumPy index array is allowed.
Streams and events are no-ops: everything runs in order on the host.
"""
import contextlib
import sys
import types
import weakref

import numpy as np

__version__ = "standin"
_plain = np.ndarray
_TINY32 = np.finfo(np.float32).tiny
DEVICE_BYTES = 16 << 30  # the stand-in GPU's memory, for set_limit(fraction=) and mem_info
# Ufuncs that are not arithmetic on a GPU: comparisons, classification and logic read the bits.
_EXACT = {np.isnan, np.isinf, np.isfinite, np.signbit, np.equal, np.not_equal, np.less,
          np.less_equal, np.greater, np.greater_equal, np.logical_and, np.logical_or,
          np.logical_not, np.logical_xor}


class OutOfMemoryError(MemoryError):
    """CuPy's ``cupy.cuda.memory.OutOfMemoryError``, with its message."""

    def __init__(self, size, total, limit=0):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes, "
                         f"limit set to: {limit:,} bytes).")


def _refuse(value):
    raise TypeError(f"Unsupported type {type(value)}: the stand-in for CuPy does not mix device "
                    "arrays with NumPy arrays (CuPy refuses them too); copy with asarray/asnumpy")


def _unwrap(value):
    """Stand-in arrays become plain views; plain NumPy arrays are refused; containers recurse."""
    if isinstance(value, ndarray):
        return value.view(_plain)
    if isinstance(value, _plain):
        _refuse(value)
    if type(value) in (list, tuple):
        return type(value)(_unwrap(v) for v in value)
    return value


def _wrap(value):
    """A result as a stand-in array; scalars become 0-d. A view of a device array stays a view;
    a fresh NumPy buffer is copied into a device array that owns its memory, as a CuPy array
    does (so the ledger, the pool and ``gc`` see one owner, the device array itself)."""
    if isinstance(value, ndarray):
        return value
    if isinstance(value, _plain):
        root = value
        while isinstance(root.base, _plain):
            root = root.base
        if isinstance(root, ndarray):
            return value.view(ndarray)
        owned = np.ndarray.__new__(ndarray, value.shape, value.dtype)  # counted by __array_finalize__
        np.copyto(owned.view(_plain), value)
        return owned
    if isinstance(value, np.generic):
        return _wrap(np.array(value))
    if type(value) in (list, tuple):
        return type(value)(_wrap(v) for v in value)
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


def _flush_in_place(array):
    sub = _subnormal(array)
    if sub is not None:
        np.copyto(array, np.copysign(np.float32(0), array), where=sub)


class ndarray(np.ndarray):
    """A device array of the stand-in: a NumPy array that will not mix with plain NumPy arrays."""

    def __array_finalize__(self, obj):
        if self.flags.owndata:  # a fresh buffer made by a method (copy, astype, fancy indexing)
            POOL.adopt(self)

    @property
    def __cuda_array_interface__(self):
        face = self.__array_interface__
        return {"shape": face["shape"], "typestr": face["typestr"], "data": face["data"],
                "strides": face.get("strides"), "version": 3}

    @property
    def device(self):
        return cuda.Device(0)

    def get(self, stream=None, order="C", out=None, blocking=True):
        """A NumPy copy, or a copy into ``out`` (CuPy's ``ndarray.get``)."""
        return asnumpy(self, out=out)

    def set(self, arr, stream=None):
        """Copy a NumPy array in (CuPy's ``ndarray.set``)."""
        self.view(_plain)[...] = arr

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        outs = kwargs.get("out") or ()
        args = _unwrap(inputs)
        if outs:
            kwargs["out"] = _unwrap(tuple(outs))
        if method == "at" and ufunc is np.add:
            _check_scatter(inputs[0])
        flush = ufunc not in _EXACT and method != "at"
        if flush:
            args = tuple(_flushed(a) for a in args)
        result = getattr(ufunc, method)(*args, **kwargs)
        if method == "at":
            return None
        result = (outs[0] if len(outs) == 1 and not isinstance(result, tuple) else tuple(outs)) if outs \
            else _wrap(result)
        if flush:
            for r in result if isinstance(result, tuple) else (result,):
                _flush_in_place(r.view(_plain))
        return result

    def __array_function__(self, func, types_, args, kwargs):
        return _wrap(func(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()}))


class _Pool:
    """CuPy's default memory pool, counted: blocks rounded up to 512 B, freed blocks cached."""

    def __init__(self):
        self.used, self.cached, self.limit, self.hooks = 0, {}, 0, []

    def adopt(self, buffer):
        size = buffer.nbytes
        if size == 0:
            return
        mem_size = -(-size // 512) * 512
        ptr, pmem_id = buffer.__array_interface__["data"][0], id(buffer)
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
    """A NumPy ufunc as a stand-in module attribute: refuses NumPy arrays, keeps results on device."""

    def __init__(self, ufunc):
        self.ufunc = ufunc

    def __call__(self, *args, **kwargs):
        return _device_call(self.ufunc, args, kwargs)

    def __getattr__(self, name):
        method = getattr(self.ufunc, name)
        if not callable(method):
            return method
        return lambda *args, **kwargs: _device_call(method, args, kwargs)


def _device_call(func, args, kwargs):
    """``func`` on device arrays only; a call with none (``zeros``) makes its result on the device.
    The stand-in arrays themselves are passed on: their ``__array_ufunc__`` flushes float32."""
    _unwrap(args), _unwrap(tuple(kwargs.values()))  # refuses NumPy operands before NumPy sees them
    return _wrap(func(*args, **kwargs))


def asarray(a, dtype=None, order=None):
    """On the device: stand-in arrays as they are (cast if asked), anything else copied over."""
    if isinstance(a, ndarray):
        return a if dtype is None or a.dtype == np.dtype(dtype) else a.astype(dtype)
    return _wrap(np.array(a, dtype=dtype, order=order or "K"))


def array(obj, dtype=None, copy=True, order="K", ndmin=0):
    """A device array of ``obj`` (CuPy's ``cupy.array``: a copy unless ``copy=False`` allows none)."""
    if isinstance(obj, ndarray) and not copy and (dtype is None or obj.dtype == np.dtype(dtype)) and obj.ndim >= ndmin:
        return obj
    return _wrap(np.array(obj.view(np.ndarray) if isinstance(obj, ndarray) else obj, dtype=dtype, copy=True,
                          order=order, ndmin=ndmin))


def asnumpy(a, stream=None, out=None):
    """A NumPy copy of a stand-in array (NumPy arrays are returned as they are, as CuPy does)."""
    result = np.array(a.view(_plain)) if isinstance(a, ndarray) else np.asarray(a)
    if out is not None:
        out[...] = result
        return out
    return result


_found = {}  # not globals(): xp.any, xp.sum, xp.abs would hide the builtins of this file


def __getattr__(name):
    """Every other name of NumPy: dtypes and constants as they are, functions on the device."""
    value = _found.get(name)
    if value is None:
        value = getattr(np, name)
        if isinstance(value, np.ufunc):
            value = _Ufunc(value)
        elif callable(value) and not isinstance(value, type):
            value = (lambda func: lambda *args, **kwargs: _device_call(func, args, kwargs))(value)
        _found[name] = value
    return value


class _Generator:
    """``cupy.random.Generator``: NumPy's, drawing onto the device."""

    def __init__(self, seed):
        self.numpy = np.random.default_rng(seed)

    def __getattr__(self, name):
        method = getattr(self.numpy, name)
        return lambda *args, **kwargs: _wrap(method(*args, **kwargs))


random = types.SimpleNamespace(default_rng=_Generator)
linalg = types.SimpleNamespace(**{name: (lambda f: lambda *a, **k: _device_call(f, a, k))(getattr(np.linalg, name))
                                  for name in ("norm", "svd", "qr", "inv", "solve", "eigh")})


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
    _check_scatter(a)
    np.add.at(_unwrap(a), _unwrap(slices), _unwrap(value))


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
