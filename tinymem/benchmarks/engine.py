"""The engine's cost: the same MLP training step in tinymem, in hand-written NumPy, and in PyTorch.

4 x Linear(1024) with ReLU, batch 256, float32, cross-entropy, plain SGD. The hand-written loop
is the floor for anything built on NumPy: the same matmuls with no graph and no ledger. All
three run in turns in one process on the same BLAS thread count, and the table reports ratios.
The second half times one tiny op, where only the Python overhead of the engine is left.
"""
import os
import time

import numpy as np

from .. import functional as F
from .. import memory, models, optim, random
from ..autograd import Tensor, no_grad
from ..measure.timing import interleaved_times

NAME = "engine"
DESCRIPTION = "MLP step: tinymem vs hand-written NumPy vs PyTorch CPU; per-op overhead"


def _blas_threads():
    try:
        from threadpoolctl import threadpool_info
        counts = [p["num_threads"] for p in threadpool_info() if p.get("user_api") == "blas"]
        return max(counts) if counts else os.cpu_count()
    except ImportError:
        return os.cpu_count()


def _numpy_step(ws, bs, x, y, lr):
    """Forward, backward and SGD by hand: what tinymem computes, with nothing around it."""
    hs = [x]
    h = x
    for i, (w, b) in enumerate(zip(ws, bs)):
        h = h @ w.T + b
        if i < len(ws) - 1:
            h = np.maximum(h, 0)
        hs.append(h)
    z = h - h.max(1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(1, keepdims=True)
    g = p
    g[np.arange(len(y)), y] -= 1
    g /= len(y)
    for i in reversed(range(len(ws))):
        gw = g.T @ hs[i]
        gb = g.sum(0)
        if i > 0:
            g = (g @ ws[i]) * (hs[i] > 0)
        ws[i] -= lr * gw
        bs[i] -= lr * gb


def mlp_problem(quick=False):
    """The MLP step in tinymem and by hand on the same weights and batch:
    ``(sizes, data, model, opt, tinymem_step, numpy_step)``."""
    width, batch, depth = (256, 64, 4) if quick else (1024, 256, 4)
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((batch, width)).astype(np.float32)
    y_np = rng.integers(0, width, batch)
    random.manual_seed(0)
    model = models.MLP([width] * (depth + 1))
    opt = optim.SGD(model.parameters(), lr=1e-3)
    ws = [model[2 * i].weight.numpy().copy() for i in range(depth)]
    bs = [model[2 * i].bias.numpy().copy() for i in range(depth)]
    x, y = Tensor(x_np), Tensor(y_np)

    def tinymem_step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return ((width, batch, depth), (x, y, x_np, y_np), model, opt, tinymem_step,
            lambda: _numpy_step(ws, bs, x_np, y_np, 1e-3))


def run(quick=False):
    (width, batch, depth), (x, y, x_np, y_np), model, opt, tinymem_step, numpy_step = mlp_problem(quick)
    threads = _blas_threads()
    fns = {"tinymem": tinymem_step, "numpy": numpy_step}
    try:
        import torch
        torch.set_num_threads(threads)
        tmodel = torch.nn.Sequential(*[m for i in range(depth) for m in (
            torch.nn.Linear(width, width), torch.nn.ReLU())][:-1])
        topt = torch.optim.SGD(tmodel.parameters(), lr=1e-3)
        tx, ty = torch.tensor(x_np), torch.tensor(y_np)

        def torch_step():
            topt.zero_grad()
            torch.nn.functional.cross_entropy(tmodel(tx), ty).backward()
            topt.step()
        fns["torch"] = torch_step
    except ImportError:
        pass
    times = interleaved_times(fns, repeats=5 if quick else 20, warmup=2)
    # Free last step's gradients before the window: tracemalloc only sees frees of blocks it
    # saw allocated, so memory born before the window must not be recycled inside it.
    opt.zero_grad()
    with memory.track() as t:
        F.cross_entropy(model(x), y).backward()
        opt.step()
    rows = []
    for name, sec in times.items():
        rows.append({"what": f"MLP step {depth}x{width}, batch {batch}", "impl": name,
                     "ms": sec * 1e3, "x numpy": sec / times["numpy"],
                     "x torch": sec / times["torch"] if "torch" in times else float("nan"),
                     "threads": threads})
    rows.append({"what": "step peak growth, MiB: ledger | tracemalloc", "impl": "tinymem",
                 "ms": "-", "x numpy": f"{t.peak_delta() / 2**20:.2f}",
                 "x torch": f"{t.measured_peak() / 2**20:.2f}", "threads": "-"})
    rows += _overhead(quick)
    return rows


def _overhead(quick):
    """Microseconds per tiny op: the engine's Python cost with almost no arithmetic."""
    n = 2000 if quick else 20000
    a_np, b_np = np.ones(4, np.float32), np.ones(4, np.float32)
    a, b = Tensor(a_np, requires_grad=True), Tensor(b_np)
    rows = []
    for label, fn in (("numpy a*b", lambda: a_np * b_np), ("tinymem a*b, no_grad", None),
                      ("tinymem a*b, recording", lambda: a * b)):
        if fn is None:
            def fn():
                with no_grad():
                    return a * b
        start = time.perf_counter()
        for _ in range(n):
            fn()
        rows.append({"what": "tiny op (4 floats)", "impl": label,
                     "ms": (time.perf_counter() - start) / n * 1e3, "x numpy": "-",
                     "x torch": "-", "threads": 1})
    return rows
