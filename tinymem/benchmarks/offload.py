"""Offload side by side: our save_on_host against PyTorch's save_on_cpu, and the disk targets.

Each framework's offload is reported as a ratio to its own plain step, timed in alternation in
one run (best of ``repeats``), so the two frameworks' different speeds cancel. The disk rows
check the issue's targets: disk step time against the time predicted from the bytes moved and
the disk bandwidths measured in the same run, and prefetch against no prefetch.
"""
import tempfile
import time

import numpy as np

from .. import optim
from ..experiments import offload as exp
from ..techniques import offload

NAME = "offload"
DESCRIPTION = "save_on_host vs torch save_on_cpu; disk offload vs its predicted time; prefetch"


def _torch_rows(cfg, repeats):
    try:
        import torch
    except ImportError:
        return [{"framework": "torch", "mode": "skipped", "note": "PyTorch is not installed"}]
    torch.manual_seed(0)
    sizes = cfg["sizes"]
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(torch.nn.Tanh())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((cfg["batch"], sizes[0])).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, sizes[-1], cfg["batch"]))

    def step(offloaded):
        opt.zero_grad()
        if offloaded:
            with torch.autograd.graph.save_on_cpu(pin_memory=False):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    best = _alternate({"plain": lambda: step(False), "save_on_cpu": lambda: step(True)}, repeats)
    return [{"framework": "torch", "mode": m, "ms": best[m] * 1e3, "ratio_to_plain": best[m] / best["plain"]}
            for m in ("plain", "save_on_cpu")]


def _alternate(fns, repeats):
    best = {name: float("inf") for name in fns}
    for _ in range(repeats + 1):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def run(quick=False):
    cfg = exp.config(quick)
    repeats = cfg["repeats"]
    directory = tempfile.gettempdir()
    model, x, y = exp.make_problem(cfg, "cpu")
    opt = optim.SGD(model.parameters(), lr=1e-3)
    modes = ("none", "host", "disk", "disk+prefetch")
    stats = {m: exp.train_step(model, opt, x, y, exp.activation_context(m, directory)) for m in modes}
    best = _alternate({m: (lambda m=m: exp.train_step(model, opt, x, y, exp.activation_context(m, directory)))
                       for m in modes}, repeats)
    bw = offload.measure_bandwidths(directory=directory, repeats=repeats, page_cache=exp.PAGE_CACHE,
                                    sizes=exp.saved_sizes(model, x, y))
    rows = []
    for m in modes:
        row = {"framework": "tinymem", "mode": {"none": "plain", "host": "save_on_host"}.get(m, m),
               "ms": best[m] * 1e3, "ratio_to_plain": best[m] / best["none"]}
        if m.startswith("disk"):
            s = stats[m].stats()
            predicted = offload.predicted_seconds(best["none"], s["bytes_out"], s["bytes_in"], bw, "disk")
            row.update(predicted_ms=predicted * 1e3, ratio_to_predicted=best[m] / predicted,
                       target="<= 1.2" if m == "disk" else "< disk")
        rows.append(row)
    columns = ("framework", "mode", "ms", "ratio_to_plain", "predicted_ms", "ratio_to_predicted", "target", "note")
    return [{c: row.get(c, "") for c in columns} for row in _torch_rows(cfg, repeats) + rows]
