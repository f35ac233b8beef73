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

- **Kernel launches and host syncs are counted** inside ``with counting() as counts:``
  (``counts.launches``, ``counts.syncs``, ``counts.generators``, ``counts.report()`` naming the
  line of each): one launch per ufunc call, reduction, gather (an index array or mask),
  ``__setitem__``, copy, ``astype``, scatter, draw, module function that makes a new buffer
  (not ``empty``, not a view), and per fused kernel (``fused_kernel(name)``: the ufuncs of its
  Python body are one launch); one sync per ``float()``, ``int()``, ``bool()``, ``.item()``,
  ``.tolist()``, ``.get()`` and ``asnumpy``. Budgets on both are ordinary tests.

What it does not catch: ``np.asarray(x)`` on a stand-in array quietly gives a NumPy view (a
subclass cannot refuse it; CuPy raises), and indexing with a NumPy index array is allowed.
Streams and events are no-ops: everything runs in order on the host.
"""
import contextlib
import sys
import threading
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


# -- Counting: kernel launches and host syncs --------------------------------------------------
# ONE hook, :func:`_record`, reached from the dispatch points (``_launch`` around every device
# operation, ``_host_read`` on every device-to-host read). A launch inside another (NumPy's
# ``a.sum()`` calling ``np.add.reduce``, a fused kernel's ufuncs) is not counted again.
_counting = {"blocks": []}
# How deep this thread is inside a launch: per thread, so that another thread's kernel in
# flight does not hide this thread's launches (a shared depth counted them as nested: 0).
_depth = threading.local()
_HERE = __file__


class Counts:
    """What ran inside one :func:`counting` block: ``launches`` (kernels: elementwise ops,
    reductions, gathers, scatters, copies, fused kernels), ``syncs`` (device-to-host reads that
    stall the host: ``float()``, ``int()``, ``bool()``, ``.item()``, ``.get()``, ``asnumpy``,
    ``.tolist()``), ``generators`` (random generators built) and ``sites``, each ``(kind,
    "file:line function")`` with its count, to print when a budget fails."""

    def __init__(self):
        self.launches = self.syncs = self.generators = 0
        self.sites = {}

    def report(self):
        rows = sorted(self.sites.items(), key=lambda item: -item[1])
        return (f"{self.launches} launches, {self.syncs} syncs, {self.generators} generators:\n"
                + "\n".join(f"  {n:4d} {kind:9s} {site}" for (kind, site), n in rows))


def _site():
    """The first caller outside the stand-in, NumPy and tinymem's kernel runner."""
    frame = sys._getframe(2)
    while frame is not None and (frame.f_code.co_filename == _HERE or "/numpy/" in frame.f_code.co_filename
                                 or frame.f_code.co_filename.endswith(("contextlib.py", "tinymem/fused.py"))):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{'/'.join(frame.f_code.co_filename.split('/')[-2:])}:{frame.f_lineno} {frame.f_code.co_name}"


_FIELDS = {"launch": "launches", "sync": "syncs", "generator": "generators"}


def _record(kind, site=None):
    """The one counting hook: one ``kind`` ("launch", "sync", "generator") at ``site``."""
    if not _counting["blocks"]:
        return
    where = site or _site()
    for counts in _counting["blocks"]:
        field = _FIELDS[kind]
        setattr(counts, field, getattr(counts, field) + 1)
        counts.sites[kind, where] = counts.sites.get((kind, where), 0) + 1


class _Launch:
    """``with _Launch():`` around a device operation: one launch, unless inside another."""

    def __init__(self, site=None):
        self.site = site

    def __enter__(self):
        if getattr(_depth, "value", 0) == 0:
            _record("launch", self.site)
        _depth.value = getattr(_depth, "value", 0) + 1
        return self

    def __exit__(self, *exc):
        _depth.value -= 1


def _launch(method):
    """Decorator: each call of ``method`` is one kernel launch."""
    def counted(*args, **kwargs):
        with _Launch():
            return method(*args, **kwargs)
    counted.__name__ = method.__name__
    return counted


def _host_read(method):
    """Decorator: each call of ``method`` reads device memory on the host: one sync."""
    def counted(*args, **kwargs):
        _record("sync")
        return method(*args, **kwargs)
    counted.__name__ = method.__name__
    return counted


def fused_kernel(name):
    """``with fused_kernel(name):`` around the ufuncs of one fused kernel's Python body
    (``tinymem.fused``): they count as one launch, as the kernel CuPy compiles from it."""
    return _Launch(f"fused kernel {name}")


@contextlib.contextmanager
def counting():
    """Count launches, syncs and generators inside the block; yields a :class:`Counts`."""
    counts = Counts()
    _counting["blocks"].append(counts)
    try:
        yield counts
    finally:
        _counting["blocks"].remove(counts)


def _is_gather(key):
    """Whether indexing with ``key`` copies (an index array, a list, a mask) rather than views."""
    keys = key if isinstance(key, tuple) else (key,)
    return any(isinstance(k, (_plain, list)) for k in keys)


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

    @_host_read
    def get(self, stream=None, order="C", out=None, blocking=True):
        """A NumPy copy, or a copy into ``out`` (CuPy's ``ndarray.get``)."""
        return _asnumpy(self, out=out)

    # Counted host reads and device operations that are methods, not ufuncs.
    __float__ = _host_read(_plain.__float__)
    __int__ = _host_read(_plain.__int__)
    __index__ = _host_read(_plain.__index__)
    __bool__ = _host_read(_plain.__bool__)
    item = _host_read(_plain.item)
    tolist = _host_read(_plain.tolist)
    copy = _launch(_plain.copy)
    mean, var, std = _launch(_plain.mean), _launch(_plain.var), _launch(_plain.std)
    take = _launch(_plain.take)
    fill = _launch(_plain.fill)
    flatten = _launch(_plain.flatten)
    __setitem__ = _launch(_plain.__setitem__)

    def astype(self, dtype, order="K", casting="unsafe", subok=True, copy=True):
        if not copy and self.dtype == np.dtype(dtype):
            return self  # no kernel, as on CuPy
        with _Launch():
            return _plain.astype(self, dtype, order=order, casting=casting, subok=subok, copy=copy)

    def __getitem__(self, key):
        if _is_gather(key):
            with _Launch():
                return _plain.__getitem__(self, key)
        return _plain.__getitem__(self, key)

    def set(self, arr, stream=None):
        """Copy a NumPy array in (CuPy's ``ndarray.set``)."""
        self.view(_plain)[...] = arr

    @_launch
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
        return _counted_call(func, args, kwargs, lambda: _wrap(func(*_unwrap(args), **{k: _unwrap(v) for k, v in kwargs.items()})))


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
    return _counted_call(func, args, kwargs, lambda: _wrap(func(*args, **kwargs)))


_NO_KERNEL = {"empty", "empty_like", "shape", "ndim", "size", "result_type", "can_cast", "iscomplexobj"}


def _counted_call(func, args, kwargs, call):
    """``call()``, counted as one launch unless it only makes a view of an input, or an
    uninitialised buffer (``empty``), as on CuPy, where neither runs a kernel."""
    if getattr(_depth, "value", 0) or not _counting["blocks"] or getattr(func, "__name__", "") in _NO_KERNEL:
        return call()
    site = _site()
    _depth.value = 1
    try:
        result = call()
    finally:
        _depth.value = 0
    inputs = [a for a in (list(args) + list(kwargs.values())) if isinstance(a, ndarray)]
    if not (isinstance(result, ndarray) and any(np.shares_memory(result.view(_plain), a.view(_plain)) for a in inputs)
            and "out" not in kwargs):
        _record("launch", site)
    return result


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


@_host_read
def asnumpy(a, stream=None, out=None):
    return _asnumpy(a, stream, out)


def _asnumpy(a, stream=None, out=None):
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
        return _launch(lambda *args, **kwargs: _wrap(method(*args, **kwargs)))


def _default_rng(seed=None):
    _record("generator")
    return _Generator(seed)


random = types.SimpleNamespace(default_rng=_default_rng)
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


@_launch
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
