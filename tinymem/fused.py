"""Fused elementwise kernels: one Python body, one CUDA kernel on a GPU, plain ufuncs elsewhere.

On a GPU every ufunc is a kernel launch that reads its operands from memory and writes its
result back: Adam written as 13 ufuncs moves about 116 bytes per parameter, where one kernel
that keeps the intermediates in registers moves 20. A :class:`Kernel` is written once, as a
Python function of its arguments (``body(ops, *params)`` returning the new value of each output
parameter), with the parameter types of ``cupy.ElementwiseKernel``::

    axpy = Kernel("axpy", "float32 x, float32 a", "float32 y", lambda ops, x, a, y: (a * x + y,),
                  scalars=("a",))
    axpy(x, np.float32(2), y)          # y = 2 x + y, in place

- On CuPy the body is traced once: called with symbolic values whose operators write C, it
  becomes the snippet of a ``cupy.ElementwiseKernel`` (:meth:`Kernel.snippet`), compiled once
  per device: one launch, each input read once, each output written once.
- On NumPy (and on any module without ``ElementwiseKernel``, such as the tests' stand-in for
  CuPy) the same body runs as ufuncs on whole arrays, so CI runs the source the GPU runs. A
  module with ``fused_kernel(name)`` (the stand-in) is told that those ufuncs are one kernel,
  and counts one launch. The snippet is traced there too, so a body the tracer cannot
  translate fails in CI.

``ops`` offers what both sides have: arithmetic, comparison and bit operators on values and
scalars (NumPy 2's promotion: a Python scalar takes the array's type), ``sqrt``, ``exp``,
``log``, ``cos``, ``sin``, ``abs``, ``maximum``, ``minimum`` (NaN-propagating, as NumPy's),
``where``, ``isnan``, ``isfinite``, ``cast``, ``bitcast`` (a ``view`` of the bits),
``take(raw, index)`` (a gather from a ``raw`` parameter), ``index()`` (the element's flat
index) and ``flag_if(raw, condition)`` (sets ``raw[0] = 1`` where the condition holds: a
flag without a reduction). Every kernel is listed in :data:`KERNELS`; :func:`cuda_source`
wraps a snippet in the ``__global__`` function CuPy would build, which the tests compile with
``nvcc -arch=sm_90`` (``scalars`` names the inputs passed as numbers, not arrays).

Memory: on a GPU none beyond the outputs. On NumPy the body's temporaries, each the size of
the arguments (the callers keep their cache-sized in-place code on the CPU and use kernels on
devices).
"""
import contextlib

import numpy as np

from . import backend

KERNELS = []  # every kernel defined, in order: the tests compile them all with nvcc

_C_TYPES = {"float32": "float", "float64": "double", "int8": "signed char", "uint8": "unsigned char",
            "int16": "short", "uint16": "unsigned short", "int32": "int", "uint32": "unsigned int",
            "int64": "long long", "uint64": "unsigned long long", "bool": "bool"}
_BITCASTS = {("float32", "uint32"): "__float_as_uint", ("float32", "int32"): "__float_as_int",
             ("uint32", "float32"): "__uint_as_float", ("int32", "float32"): "__int_as_float",
             ("float64", "int64"): "__double_as_longlong", ("int64", "float64"): "__longlong_as_double"}


class _Param:
    def __init__(self, text, out):
        words = text.split()
        self.raw = words[0] == "raw"
        dtype, self.name = words[-2:]
        self.dtype, self.out = np.dtype(dtype), out
        if self.dtype.name not in _C_TYPES:
            raise TypeError(f"kernel parameter {text!r}: dtype {dtype} has no C type here")

    def declaration(self):
        return f"{'raw ' if self.raw else ''}{self.dtype.name} {self.name}"


class Kernel:
    """An elementwise kernel from a Python ``body`` (see the module docstring)."""

    def __init__(self, name, in_params, out_params, body, scalars=()):
        self.name, self.body, self.scalars = name, body, tuple(scalars)
        self.inputs = [_Param(p, False) for p in in_params.split(",") if p.strip()]
        self.outputs = [_Param(p, True) for p in out_params.split(",") if p.strip()]
        self._snippet, self._compiled = None, {}
        KERNELS.append(self)

    def snippet(self):
        """The C body of the ``ElementwiseKernel``: the Python body traced once."""
        if self._snippet is None:
            self._snippet = _trace(self)
        return self._snippet

    def __call__(self, *args):
        """Run on the arguments, in the order inputs then outputs; outputs are written in place
        and returned (one array, or a tuple)."""
        if len(args) != len(self.inputs) + len(self.outputs):
            raise TypeError(f"kernel {self.name} takes {len(self.inputs) + len(self.outputs)} arguments "
                            f"({', '.join(p.name for p in self.inputs + self.outputs)}), got {len(args)}")
        for a, p in zip(args, self.inputs + self.outputs):
            if hasattr(a, "dtype") and not isinstance(a, np.generic) and a.dtype != p.dtype:
                # CuPy refuses it ("Type is mismatched"); NumPy would compute in the array's type
                raise TypeError(f"kernel {self.name}: {p.name} must be a {p.dtype} array, got {a.dtype}; "
                                f"cast it with .astype(np.{p.dtype.name}) first")
        xp = backend.array_module(next(a for a, p in zip(args[len(self.inputs):], self.outputs) if not p.raw))
        if hasattr(xp, "ElementwiseKernel"):
            if xp not in self._compiled:
                self._compiled[xp] = xp.ElementwiseKernel(
                    ", ".join(p.declaration() for p in self.inputs), ", ".join(p.declaration() for p in self.outputs),
                    self.snippet(), self.name)
            self._compiled[xp](*args)
        else:
            self.snippet()
            with getattr(xp, "fused_kernel", _no_kernel)(self.name), np.errstate(all="ignore"):
                self._run(xp, args)
        outs = args[len(self.inputs):]
        return outs[0] if len(outs) == 1 else outs

    def _run(self, xp, args):
        params = self.inputs + self.outputs
        # a scalar takes its parameter's type, a NumPy one too (as CuPy casts it): an np.float64
        # for a float32 parameter would make NumPy compute in float64
        values = [a if (p.raw or not isinstance(a, (np.generic, int, float, bool))) else p.dtype.type(a)
                  for a, p in zip(args, params)]
        shape = next(a.shape for a, p in zip(args, params) if p.out and not p.raw)
        results = self.body(_ArrayOps(xp, shape), *values)
        for param, array, value in zip(self.outputs, args[len(self.inputs):], results):
            if not param.raw:
                array[...] = value


@contextlib.contextmanager
def _no_kernel(name):
    yield


class _ArrayOps:
    """``ops`` on arrays: the body runs as ufuncs of ``xp``."""

    def __init__(self, xp, shape):
        self.xp, self.shape = xp, shape
        for name in ("sqrt", "exp", "log", "cos", "sin", "abs", "maximum", "minimum", "where", "isnan", "isfinite"):
            setattr(self, name, getattr(xp, name))

    def cast(self, x, dtype):
        return x.astype(dtype) if hasattr(x, "astype") else np.dtype(dtype).type(x)

    def bitcast(self, x, dtype):
        return x.view(dtype)

    def take(self, raw, index):
        return raw.reshape(-1)[index]  # CuPy indexes a raw parameter by its flat index

    def index(self):
        return self.xp.arange(int(np.prod(self.shape)), dtype=np.int64).reshape(self.shape)

    def flag_if(self, raw, condition):
        first = raw[(0,) * (raw.ndim - 1)][:1]  # raw[0] in C: the first element, whatever the shape
        self.xp.bitwise_or(first, condition.any().astype(raw.dtype), out=first)


# -- tracing: the body called with symbolic values writes C --------------------------------------

class _Tracer:
    def __init__(self):
        self.lines = []

    def emit(self, dtype, expression):
        name = f"_t{len(self.lines)}"
        self.lines.append(f"{_C_TYPES[np.dtype(dtype).name]} {name} = {expression};")
        return _Value(self, name, dtype)


def _literal(value, dtype):
    dtype = np.dtype(dtype)
    v = dtype.type(value)
    if dtype.kind == "b":
        return "true" if v else "false"
    if dtype == np.float32:
        return f"__uint_as_float({int(v.view(np.uint32))}u)"  # exact bits, no decimal rounding
    if dtype == np.float64:
        return f"__longlong_as_double({int(v.view(np.int64))}ll)"
    return f"(({_C_TYPES[dtype.name]}){int(v)}{'ull' if dtype.kind == 'u' else 'll'})"


def _dtype_of(x):
    return x.dtype if isinstance(x, (_Value, np.generic)) else x


def _operand(x, dtype):
    """C text of ``x`` (a value or a scalar) as a ``dtype``."""
    if isinstance(x, _Value):
        return x.name if x.dtype == dtype else f"(({_C_TYPES[dtype.name]}){x.name})"
    return _literal(x, dtype)


class _Value:
    """A value of a traced body: a C local of a NumPy dtype."""

    __array_ufunc__ = None  # NumPy scalars defer to the operators below

    def __init__(self, tracer, name, dtype):
        self.tracer, self.name, self.dtype = tracer, name, np.dtype(dtype)

    def __bool__(self):
        raise TypeError("a kernel body cannot branch on a value (if, and, or, not, 0 < x < 1, min, max): "
                        "C would see one branch only; use ops.where, &, |, ~, ops.minimum, ops.maximum")

    def _binary(self, other, op, reflected=False, result=None, floor=False):
        a, b = (other, self) if reflected else (self, other)
        dtype = np.result_type(_dtype_of(a), _dtype_of(b))  # NumPy's type, shifts included
        if op == "/" and (dtype.kind == "f") == floor or floor and dtype.kind != "u":
            raise TypeError("kernel bodies divide floats with / and unsigned integers with //, "
                            "where C's division is NumPy's")
        text = f"({_operand(a, dtype)} {op} {_operand(b, dtype)})"
        return self.tracer.emit(result or dtype, text)

    def __add__(self, o): return self._binary(o, "+")
    def __radd__(self, o): return self._binary(o, "+", True)
    def __sub__(self, o): return self._binary(o, "-")
    def __rsub__(self, o): return self._binary(o, "-", True)
    def __mul__(self, o): return self._binary(o, "*")
    def __rmul__(self, o): return self._binary(o, "*", True)
    def __truediv__(self, o): return self._binary(o, "/")
    def __rtruediv__(self, o): return self._binary(o, "/", True)
    def __floordiv__(self, o): return self._binary(o, "/", floor=True)
    def __and__(self, o): return self._binary(o, "&")
    def __rand__(self, o): return self._binary(o, "&", True)
    def __or__(self, o): return self._binary(o, "|")
    def __ror__(self, o): return self._binary(o, "|", True)
    def __xor__(self, o): return self._binary(o, "^")
    def __rxor__(self, o): return self._binary(o, "^", True)
    def __rshift__(self, o): return self._binary(o, ">>")
    def __rrshift__(self, o): return self._binary(o, ">>", True)
    def __lshift__(self, o): return self._binary(o, "<<")
    def __rlshift__(self, o): return self._binary(o, "<<", True)
    def __lt__(self, o): return self._binary(o, "<", result=np.bool_)
    def __le__(self, o): return self._binary(o, "<=", result=np.bool_)
    def __gt__(self, o): return self._binary(o, ">", result=np.bool_)
    def __ge__(self, o): return self._binary(o, ">=", result=np.bool_)
    def __eq__(self, o): return self._binary(o, "==", result=np.bool_)
    def __ne__(self, o): return self._binary(o, "!=", result=np.bool_)
    def __neg__(self): return self.tracer.emit(self.dtype, f"(-{self.name})")
    def __invert__(self): return self.tracer.emit(self.dtype, f"({'!' if self.dtype.kind == 'b' else '~'}{self.name})")
    __hash__ = object.__hash__


class _Raw:
    def __init__(self, name, dtype):
        self.name, self.dtype = name, np.dtype(dtype)


class _TraceOps:
    """``ops`` while tracing: each call writes one C line."""

    def __init__(self, tracer):
        self.t = tracer

    def _math(self, name, x):
        dtype = getattr(np, name.lstrip("f"))(np.ones(1, x.dtype)).dtype  # NumPy's: sqrt(int32) is a float64
        if dtype.name not in ("float32", "float64"):
            raise TypeError(f"ops.{name.lstrip('f')} of a {x.dtype} value gives {dtype} in NumPy, which kernels "
                            "lack: ops.cast it to float32 first")
        return self.t.emit(dtype, f"{name}{'f' if dtype == np.float32 else ''}({_operand(x, dtype)})")

    def sqrt(self, x): return self._math("sqrt", x)
    def exp(self, x): return self._math("exp", x)
    def log(self, x): return self._math("log", x)
    def cos(self, x): return self._math("cos", x)
    def sin(self, x): return self._math("sin", x)

    def abs(self, x):
        if x.dtype.kind == "f":
            return self._math("fabs", x)
        return x if x.dtype.kind in "ub" else self.t.emit(x.dtype, f"({x.name} < 0 ? -{x.name} : {x.name})")

    def _extreme(self, a, b, op):
        dtype = np.result_type(_dtype_of(a), _dtype_of(b))
        x, y = _operand(a, dtype), _operand(b, dtype)
        nan = f"{x} != {x} || " if dtype.kind == "f" else ""  # NumPy's maximum propagates NaN
        return self.t.emit(dtype, f"(({nan}{x} {op} {y}) ? {x} : {y})")

    def maximum(self, a, b): return self._extreme(a, b, ">")
    def minimum(self, a, b): return self._extreme(a, b, "<")

    def where(self, condition, a, b):
        dtype = np.result_type(_dtype_of(a), _dtype_of(b))
        return self.t.emit(dtype, f"({_operand(condition, np.dtype(bool))} ? {_operand(a, dtype)} : {_operand(b, dtype)})")

    def isnan(self, x): return self.t.emit(np.bool_, f"isnan({x.name})")
    def isfinite(self, x): return self.t.emit(np.bool_, f"isfinite({x.name})")

    def cast(self, x, dtype):
        return self.t.emit(dtype, _operand(x, np.dtype(dtype)))

    def bitcast(self, x, dtype):
        dtype = np.dtype(dtype)
        if x.dtype.itemsize != dtype.itemsize:
            raise TypeError(f"bitcast from {x.dtype} to {dtype}: the sizes differ")
        function = _BITCASTS.get((x.dtype.name, dtype.name))
        if function is None and (x.dtype.kind == "f" or dtype.kind == "f"):
            raise TypeError(f"no bitcast from {x.dtype} to {dtype} in kernels")
        return self.t.emit(dtype, f"{function}({x.name})" if function else _operand(x, dtype))

    def take(self, raw, index):
        return self.t.emit(raw.dtype, f"{raw.name}[{index.name}]")

    def index(self):
        return self.t.emit(np.int64, "i")

    def flag_if(self, raw, condition):
        self.t.lines.append(f"if ({condition.name}) {raw.name}[0] = 1;")


def _trace(kernel):
    tracer = _Tracer()
    values = [_Raw(p.name, p.dtype) if p.raw else _Value(tracer, p.name, p.dtype)
              for p in kernel.inputs + kernel.outputs]
    results = kernel.body(_TraceOps(tracer), *values)
    for param, value in zip(kernel.outputs, results):
        if not param.raw:
            tracer.lines.append(f"{param.name} = {_operand(value, param.dtype)};")
    return "\n".join(tracer.lines)


def cuda_source(kernel):
    """The whole ``__global__`` function CuPy would build around ``kernel``'s snippet (a
    grid-stride loop over ``i``; inputs read once, outputs as references), for ``nvcc``."""
    params, lines = [], []
    for p in kernel.inputs + kernel.outputs:
        ctype = _C_TYPES[p.dtype.name]
        if p.raw:
            params.append(f"{'' if p.out else 'const '}{ctype}* {p.name}")
        elif p.out:
            params.append(f"{ctype}* _{p.name}")
            lines.append(f"{ctype} &{p.name} = _{p.name}[i];")
        elif p.name in kernel.scalars:
            params.append(f"const {ctype} {p.name}")
        else:
            params.append(f"const {ctype}* __restrict__ _{p.name}")
            lines.append(f"const {ctype} {p.name} = _{p.name}[i];")
    body = "\n    ".join(lines + kernel.snippet().split("\n"))
    return (f'extern "C" __global__ void {kernel.name}({", ".join(params)}, const ptrdiff_t _n) {{\n'
            f"  for (ptrdiff_t i = (ptrdiff_t)blockIdx.x * blockDim.x + threadIdx.x; i < _n;"
            f" i += (ptrdiff_t)blockDim.x * gridDim.x) {{\n    {body}\n  }}\n}}\n")

