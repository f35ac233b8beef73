"""The fused kernels (``tinymem.fused``): every one compiles for the H200 (sm_90) with nvcc, and the
C the tracer writes computes what the Python body computes.

CI has no GPU, so the kernels' Python bodies run on the stand-in (test_gpu_budgets holds them
against the CPU code). What a GPU would run is the C snippet traced from that body. Here it is
compiled twice from one source: for sm_90 by nvcc (types and syntax, as CuPy's compiler would
see them), and for the host by a C++ compiler, then run on the arguments each kernel got from
the library on the stand-in, and compared with the body's results bit for bit.
"""
import ctypes
import pathlib
import re
import shutil
import subprocess

import numpy as np
import pytest

import standin_cupy as sc
import tinymem as tm
from tinymem import backend, fused, nn, optim, random
from tinymem.techniques.precision import (GradScaler, bfloat16_bits_to_float32, float32_to_bfloat16_bits,
                                          round_to_bfloat16)

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _all_kernels():
    """Import every module of tinymem that defines a Kernel, then list them all."""
    import importlib
    for path in sorted((ROOT / "tinymem").rglob("*.py")):
        if path.name != "fused.py" and re.search(r"\bKernel\(", path.read_text()):
            importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return list(fused.KERNELS)


def _source(kernels):
    return "#include <cstddef>\n" + "\n".join(fused.cuda_source(k) for k in kernels)


def test_every_kernel_compiles_for_sm90_with_nvcc(tmp_path):
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc (CUDA's compiler) is not on PATH: the kernels' CUDA source is not compiled here")
    kernels = _all_kernels()
    names = {k.name for k in kernels}
    assert {"adam_step", "adam8bit_moments", "adam8bit_codes", "bf16_encode", "grad_unscale",
            "philox_uniform"} <= names
    assert len(names) == len(kernels), "two kernels share a name: CuPy would compile one for both"
    probes = [fused.Kernel(name, ins, outs, body) for name, ins, outs, body, _ in _PROBES]
    for probe in probes:  # the probe bodies below, compiled beside the library's kernels
        fused.KERNELS.remove(probe)
    (tmp_path / "kernels.cu").write_text(_source(kernels + probes))
    run = subprocess.run([nvcc, "-arch=sm_90", "-c", "kernels.cu", "-o", "kernels.o", "-diag-suppress", "177"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stderr, run.stderr
    ptx = subprocess.run([shutil.which("cuobjdump") or "true", "-symbols", "kernels.o"], cwd=tmp_path,
                         capture_output=True, text=True)
    if ptx.returncode == 0 and ptx.stdout:
        assert all(name in ptx.stdout for name in names), ptx.stdout


_HOST_PRELUDE = """
#include <cmath>
#include <cstddef>
#include <cstring>
using std::isnan; using std::isfinite;
#define __global__
#define __restrict__ __restrict
struct _Dim { long long x; };
static const _Dim blockIdx = {0}, threadIdx = {0}, blockDim = {1}, gridDim = {1};
template <class To, class From> static inline To _bits(From f) { To t; std::memcpy(&t, &f, sizeof t); return t; }
static inline unsigned int __float_as_uint(float x) { return _bits<unsigned int>(x); }
static inline int __float_as_int(float x) { return _bits<int>(x); }
static inline float __uint_as_float(unsigned int x) { return _bits<float>(x); }
static inline float __int_as_float(int x) { return _bits<float>(x); }
static inline long long __double_as_longlong(double x) { return _bits<long long>(x); }
static inline double __longlong_as_double(long long x) { return _bits<double>(x); }
"""
_CTYPES = {"float32": ctypes.c_float, "float64": ctypes.c_double, "uint8": ctypes.c_uint8,
           "uint16": ctypes.c_uint16, "int32": ctypes.c_int32, "uint32": ctypes.c_uint32,
           "int64": ctypes.c_int64, "uint64": ctypes.c_uint64}


def _library_calls(monkeypatch):
    """One call of each kernel as the library makes it on the stand-in: arguments before, and
    the outputs the Python body wrote."""
    calls, run = {}, fused.Kernel._run

    def recording(kernel, xp, args):
        before = [np.array(backend.to_numpy(a)) if hasattr(a, "shape") else a for a in args]
        run(kernel, xp, args)
        if kernel.name not in calls:
            calls[kernel.name] = (kernel, before, [backend.to_numpy(a) for a in args[len(kernel.inputs):]])

    monkeypatch.setattr(fused.Kernel, "_run", recording)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(3000).astype(np.float32) * np.float32(1e3)
    x[:5] = [np.nan, np.inf, -1e-40, 3.4028235e38, -0.0]
    with sc.installed(), backend.default_device_as("cuda"):
        d = sc.asarray(x)
        bfloat16_bits_to_float32(float32_to_bfloat16_bits(d)), round_to_bfloat16(d)
        random.rand((999,), "cuda"), random.randn((999,), "cuda")
        for opt_class, kwargs in ((optim.Adam, {"amsgrad": False}), (optim.Adam, {"amsgrad": True}),
                                  (optim.Adam8bit, {"block_size": 256})):
            params = [nn.Parameter(tm.tensor(rng.standard_normal(s).astype(np.float32))) for s in ((70, 90), (5000,))]
            opt = opt_class(params, lr=1e-2, weight_decay=0.1, **kwargs)
            for _ in range(2):
                for p in params:
                    p.grad = tm.tensor(rng.standard_normal(p.shape).astype(np.float32))
                opt.step()
        scaler = GradScaler(init_scale=1024.0)
        p = nn.Parameter(tm.tensor(np.ones(100, np.float32)))
        opt = optim.SGD([p], lr=0.1)
        p.grad = tm.tensor(np.where(np.arange(100) == 7, np.inf, 3.0).astype(np.float32))
        scaler.step(opt)
    return calls


def test_the_traced_c_computes_what_the_python_body_computes(tmp_path, monkeypatch):
    compiler = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler on PATH to build the kernels' C for the host")
    calls = _library_calls(monkeypatch)
    assert set(calls) == {k.name for k in _all_kernels()}, "a kernel the library never called here"
    (tmp_path / "host.cpp").write_text(_HOST_PRELUDE + "\n".join(fused.cuda_source(k) for k, _, _ in calls.values()))
    build = subprocess.run([compiler, "-O1", "-ffp-contract=off", "-shared", "-fPIC", "host.cpp", "-o", "host.so"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    library = ctypes.CDLL(str(tmp_path / "host.so"))
    for name, (kernel, before, expected) in calls.items():
        args, outs = [], []
        for param, value in zip(kernel.inputs + kernel.outputs, before):
            if param.name in kernel.scalars:
                args.append(_CTYPES[param.dtype.name](value.item() if hasattr(value, "item") else value))
                continue
            array = np.ascontiguousarray(value, dtype=param.dtype).copy()
            outs.append(array) if param.out else None
            args.append(array.ctypes.data_as(ctypes.c_void_p))
            args[-1]._keep = array
        size = next(b.size for p, b in zip(kernel.outputs, before[len(kernel.inputs):]) if not p.raw)
        getattr(library, name)(*args, ctypes.c_ssize_t(size))
        for param, got, want in zip(kernel.outputs, outs, expected):
            if name == "philox_normal":  # log and cos of the host's libm against NumPy's
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
            else:
                assert np.array_equal(got.view(np.uint8), np.ascontiguousarray(want).view(np.uint8)), \
                    f"{name}: {param.name} differs between the traced C and the Python body"


def test_philox_matches_the_random123_known_answers():
    """Philox4x32-10's published known-answer vectors (Random123 1.14, kat_vectors)."""
    calls = []

    class Ops(fused._ArrayOps):
        def index(self):
            return self.xp.array([calls[-1]], dtype=np.uint64)

    for counter, key, expected in [
            ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
            ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD))]:
        calls.append(counter[0] | counter[1] << 32)
        with np.errstate(over="ignore"):
            words = random._philox(Ops(np, (1,)), np.uint32(key[0]), np.uint32(key[1]),
                                   np.uint32(counter[2]), np.uint32(counter[3]))
        assert [int(np.asarray(w).reshape(-1)[0]) for w in words] == list(expected)


def test_device_draws_are_uniform_and_normal_and_replay_from_the_state(standin):
    random.manual_seed(3)
    u, n = backend.to_numpy(random.rand((200_000,))), backend.to_numpy(random.randn((200_000,)))
    assert 0 <= u.min() and u.max() < 1 and abs(u.mean() - 0.5) < 3e-3 and abs(u.var() * 12 - 1) < 1e-2
    assert abs(n.mean()) < 1e-2 and abs(n.std() - 1) < 1e-2 and abs((np.abs(n) < 1).mean() - 0.6827) < 5e-3
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 1e-2  # neighbours (index i, i + 1) are independent
    state = tm.get_rng_state()
    first = backend.to_numpy(random.rand((64,)))
    assert not np.array_equal(first, backend.to_numpy(random.rand((64,))))  # each draw moves on
    tm.set_rng_state(state)
    assert np.array_equal(first, backend.to_numpy(random.rand((64,))))


def test_the_tracer_refuses_what_c_would_compute_differently():
    bad = fused.Kernel("bad_division", "int32 a", "int32 b", lambda ops, a, b: (a / 2,))
    fused.KERNELS.remove(bad)
    with pytest.raises(TypeError, match="unsigned integers with //"):
        bad.snippet()


def _host_run(tmp_path, kernel, args):
    """Run ``kernel``'s traced C, built for the host, on NumPy ``args``; return its outputs."""
    compiler = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if compiler is None:
        pytest.skip("no C++ compiler on PATH to build the kernels' C for the host")
    (tmp_path / "probe.cpp").write_text(_HOST_PRELUDE + fused.cuda_source(kernel))
    build = subprocess.run([compiler, "-O1", "-ffp-contract=off", "-shared", "-fPIC", "probe.cpp", "-o", "probe.so"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    library, c_args, outs = ctypes.CDLL(str(tmp_path / "probe.so")), [], []
    for param, value in zip(kernel.inputs + kernel.outputs, args):
        if param.name in kernel.scalars:
            c_args.append(_CTYPES[param.dtype.name](value))
            continue
        array = np.ascontiguousarray(value, dtype=param.dtype).copy()
        outs.append(array) if param.out else None
        c_args.append(array.ctypes.data_as(ctypes.c_void_p))
        c_args[-1]._keep = array
    getattr(library, kernel.name)(*c_args, ctypes.c_ssize_t(outs[0].size))
    return outs


_PROBES = [  # bodies where C's types differ from NumPy's unless the tracer follows NumPy
    ("probe_sqrt_int", "int32 x", "float64 y", lambda ops, x, y: (ops.sqrt(x),),
     [np.array([2, 3, 10], np.int32)]),
    ("probe_shift_mixed", "uint32 x, int32 s", "int64 y", lambda ops, x, s, y: (x << s,),
     [np.array([3, 1, 7], np.uint32), np.array([31, 4, 30], np.int32)]),
    ("probe_shift_reflected", "int32 s", "int32 y", lambda ops, s, y: (1 << s,), [np.array([0, 5, 30], np.int32)]),
    ("probe_compare_mixed", "int32 a, float32 b", "bool y", lambda ops, a, b, y: (a < b,),
     [np.array([16777217, 1, -3], np.int32), np.array([16777216, 1.5, -3], np.float32)]),
    ("probe_scalar_weak", "float32 x", "float32 y", lambda ops, x, y: (ops.where(x > 0, x * 0.1, 1 / 3),),
     [np.array([1, -1, 3], np.float32)]),
    ("probe_uint_floor", "uint32 a, uint32 b", "uint32 y", lambda ops, a, b, y: (a // b - (a ^ b) + ~a,),
     [np.array([7, 0, 2**32 - 1], np.uint32), np.array([2, 5, 3], np.uint32)]),
]


@pytest.mark.parametrize("name, ins, outs, body, args", _PROBES, ids=[p[0] for p in _PROBES])
def test_probe_bodies_compute_the_same_in_c_and_in_numpy(tmp_path, name, ins, outs, body, args):
    kernel = fused.Kernel(name, ins, outs, body)
    fused.KERNELS.remove(kernel)
    out_param = kernel.outputs[0]
    want = np.empty(args[0].shape, out_param.dtype)
    with np.errstate(all="ignore"):
        kernel(*args, want)
    got, = _host_run(tmp_path, kernel, args + [np.empty(args[0].shape, out_param.dtype)])
    assert np.array_equal(got, want), f"{name}: C gives {got}, NumPy {want}\n{kernel.snippet()}"


def test_a_body_that_branches_on_a_value_is_refused():
    """``0 < x < 1`` is ``(0 < x) and (x < 1)``: traced, ``and`` kept only the second test."""
    kernel = fused.Kernel("probe_branch", "float32 x", "float32 y", lambda ops, x, y: (ops.where(0 < x < 1, x, -x),))
    fused.KERNELS.remove(kernel)
    with pytest.raises(TypeError, match="cannot branch on a value"):
        kernel.snippet()


def test_arguments_take_the_parameters_types_as_cupy_would():
    """CuPy refuses an array of another dtype and casts a NumPy scalar to its parameter's type;
    NumPy would silently compute in float64 for both."""
    kernel = fused.Kernel("probe_scale", "float32 x, float32 a", "float32 y", lambda ops, x, a, y: (x * a,), ("a",))
    fused.KERNELS.remove(kernel)
    x, y = np.array([1 / 3], np.float32), np.empty(1, np.float32)
    assert kernel(x, np.float64(1 / 3), y)[0] == np.float32(1 / 3) * np.float32(1 / 3)
    for args in ((np.array([1 / 3]), 3.0, y), (x, 3.0, np.empty(1))):
        before = y.copy()
        with pytest.raises(TypeError, match="must be a float32 array"):
            kernel(*args)
        assert np.array_equal(y, before)


def test_take_and_flag_if_use_a_raw_arrays_flat_index():
    """In C a raw parameter is indexed by its flat index, whatever its shape."""
    def body(ops, table, j, found, y):
        ops.flag_if(found, j > 2)
        return found, ops.take(table, j)
    kernel = fused.Kernel("probe_take", "raw float32 table, int64 j", "raw int32 found, float32 y", body)
    fused.KERNELS.remove(kernel)
    found, y = np.zeros((2, 2), np.int32), np.empty(2, np.float32)
    kernel(np.arange(6, dtype=np.float32).reshape(2, 3), np.array([4, 1]), found, y)
    assert y.tolist() == [4.0, 1.0] and found.tolist() == [[1, 0], [0, 0]]
