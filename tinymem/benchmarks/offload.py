"""Offload side by side: our save_on_host against PyTorch's save_on_cpu, and the disk targets.

Each framework's offload is reported as a ratio to its own plain step, timed in alternation in
one run: the median over rounds of the ratio within a round (both runs of a round see about the
same load on a shared machine), so the two frameworks' different speeds cancel. The disk rows
check the targets: disk step time against the time predicted from the bytes moved and
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

    samples = _alternate({"plain": lambda: step(False), "save_on_cpu": lambda: step(True)}, repeats)
    return [{"framework": "torch", "mode": m, "ms": _median(samples[m]) * 1e3,
             "ratio_to_plain": _median_ratio(samples[m], samples["plain"])} for m in ("plain", "save_on_cpu")]


def _alternate(fns, repeats):
    """Seconds of each function per round, rounds after one warm-up round."""
    samples = {name: [] for name in fns}
    for round_ in range(repeats + 1):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            if round_:
                samples[name].append(time.perf_counter() - start)
    return samples


def _median(values):
    return sorted(values)[len(values) // 2]


def _median_ratio(a, b):
    return _median([x / y for x, y in zip(a, b)])


def run(quick=False):
    cfg = exp.config(quick)
    repeats = cfg["repeats"]
    directory = tempfile.gettempdir()
    model, x, y = exp.make_problem(cfg, "cpu")
    opt = optim.SGD(model.parameters(), lr=1e-3)
    modes = ("none", "host", "disk", "disk+prefetch")
    stats = {m: exp.train_step(model, opt, x, y, exp.activation_context(m, directory)) for m in modes}
    samples = _alternate({m: (lambda m=m: exp.train_step(model, opt, x, y, exp.activation_context(m, directory)))
                          for m in modes}, repeats)
    base = _median(samples["none"])
    bw = offload.measure_bandwidths(directory=directory, repeats=repeats, page_cache=exp.PAGE_CACHE,
                                    sizes=exp.saved_sizes(model, x, y))
    rows = []
    for m in modes:
        row = {"framework": "tinymem", "mode": {"none": "plain", "host": "save_on_host"}.get(m, m),
               "ms": _median(samples[m]) * 1e3, "ratio_to_plain": _median_ratio(samples[m], samples["none"])}
        if m.startswith("disk"):
            s = stats[m].stats()
            predicted = offload.predicted_seconds(base, s["bytes_out"], s["bytes_in"], bw, "disk")
            row.update(predicted_ms=predicted * 1e3, ratio_to_predicted=_median(samples[m]) / predicted,
                       target="<= 1.2" if m == "disk" else "< disk")
        if m == "disk+prefetch":
            row["note"] = f"{_median_ratio(samples[m], samples['disk']):.3f} x disk (median of rounds)"
        rows.append(row)
    columns = ("framework", "mode", "ms", "ratio_to_plain", "predicted_ms", "ratio_to_predicted", "target", "note")
    return [{c: row.get(c, "") for c in columns} for row in _torch_rows(cfg, repeats) + rows]
