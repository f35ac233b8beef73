"""One optimizer step and its state bytes, tinymem beside torch.optim on the same parameters.

Parameters: a square matrix and a bias (1024 x 1024 + 1024, quick: 256 x 256 + 256), float32,
with fixed random gradients. Both libraries step in turns in one process (``interleaved_times``),
so the ratio is fair on a noisy machine; state bytes count arrays only (PyTorch's 0-d ``step``
tensors and tinymem's Python int steps are left out on both sides). Lion, Adam8bit and GaLore
have no torch.optim counterpart; their time is also given relative to tinymem's Adam.
PyTorch runs on one thread here: NumPy's element-wise ops (all an optimizer step is, except
GaLore's matmuls) use one, and on a shared machine torch's thread pool waits for busy cores.
"""
import numpy as np

from .. import optim
from ..nn import Parameter
from ..measure.timing import interleaved_times

NAME = "optimizers"
DESCRIPTION = "optimizer step time and state bytes: tinymem vs torch.optim"

CASES = [
    ("SGD momentum", "SGD", {"lr": 0.01, "momentum": 0.9}),
    ("Adagrad", "Adagrad", {}),
    ("RMSprop centered", "RMSprop", {"momentum": 0.9, "centered": True}),
    ("Adam", "Adam", {}),
    ("AdamW amsgrad", "AdamW", {"amsgrad": True}),
    ("Adafactor", "Adafactor", {}),
    ("Lion", "Lion", {}),
    ("Adam8bit", "Adam8bit", {}),
    ("GaLore r=64", "GaLore", {"rank": 64}),
]


def _torch_state_bytes(opt):
    return sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values()
               if hasattr(v, "dim") and v.dim() > 0)


def run(quick=False):
    n = 256 if quick else 1024
    rng = np.random.default_rng(0)
    init = [rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal(n).astype(np.float32)]
    grads = [0.1 * rng.standard_normal(a.shape).astype(np.float32) for a in init]
    try:
        import torch
    except ImportError:
        torch = None
    numel = sum(a.size for a in init)
    rows, adam_ms = [], None
    threads = torch.get_num_threads() if torch is not None else None
    if torch is not None:
        torch.set_num_threads(1)
    try:
        for label, name, options in CASES:
            row = _case(label, name, options, init, grads, torch, quick, numel, adam_ms)
            if label == "Adam":
                adam_ms = row["tinymem ms"]
                row["x tinymem Adam"] = 1.0
            rows.append(row)
    finally:
        if torch is not None:
            torch.set_num_threads(threads)
    return rows


def _case(label, name, options, init, grads, torch, quick, numel, adam_ms):
    params = [Parameter(a.copy()) for a in init]
    for p, g in zip(params, grads):
        p.grad = g.copy()
    ours = getattr(optim, name)(params, **options)
    fns = {"tinymem": ours.step}
    theirs = None
    if torch is not None and hasattr(torch.optim, name):
        tparams = [torch.nn.Parameter(torch.from_numpy(a.copy())) for a in init]
        for p, g in zip(tparams, grads):
            p.grad = torch.from_numpy(g.copy())
        theirs = getattr(torch.optim, name)(tparams, **options)
        fns["torch"] = theirs.step
    times = interleaved_times(fns, repeats=3 if quick else 10, warmup=2)
    ms = times["tinymem"] * 1e3
    return {"optimizer": label, "tinymem ms": ms,
            "torch ms": times["torch"] * 1e3 if theirs is not None else "-",
            "x torch": times["tinymem"] / times["torch"] if theirs is not None else "-",
            "x tinymem Adam": ms / adam_ms if adam_ms else "-",
            "tinymem state B": ours.state_bytes(),
            "torch state B": _torch_state_bytes(theirs) if theirs is not None else "-",
            "B/param": ours.state_bytes() / numel}
