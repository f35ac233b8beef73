"""Gradient checkpointing on a 64-block MLP (Linear 512 -> ReLU), batch 128,
float32, plain against sqrt(n) = 8 segments, tinymem and PyTorch side by side in one run.

Reported: the activation peak ratio (ledger for tinymem, saved-tensor bytes for PyTorch), the
step-time ratio of each framework, and tinymem's overhead relative to PyTorch's
(ratio_tinymem / ratio_torch; target <= 1.1). Timings are interleaved (plain, checkpointed,
torch plain, torch checkpointed, ...) on one thread each, in CPU seconds of the process
(``time.process_time``), and the best of the repeats is kept: on a shared machine wall time
follows the share of the cores obtained more than the work.
"""
import time

from ..experiments.checkpoint_nets import (batch, deep_mlp, measure_memory, one_thread, step,
                                            torch_activation_peak, torch_step, torch_twin)
from ..techniques.checkpoint import resolve_segments
from ..measure.timing import interleaved_times

NAME = "checkpoint"
DESCRIPTION = "sqrt(n) checkpointing of a 64-layer MLP: activation peak and step time vs plain, vs PyTorch"


def run(quick=False):
    depth, width, size = (16, 128, 32) if quick else (64, 512, 128)
    repeats = 3 if quick else 7
    model = deep_mlp(depth, width)
    x, grad = batch(model, size)
    k = resolve_segments("sqrt", depth)
    plain = measure_memory(model, x, grad, ("none", 0), measure=False)["activation_peak"]
    ckpt = measure_memory(model, x, grad, ("segments", k), measure=False)["activation_peak"]
    fns = {"tinymem plain": lambda: step(model, x, grad, ("none", 0)),
           "tinymem sqrt": lambda: step(model, x, grad, ("segments", k))}
    rows = []
    torch_mem = None
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        twin = torch_twin(model)
        xt = torch.tensor(x.numpy(), requires_grad=True)
        gt = torch.from_numpy(grad)
        torch_mem = (torch_activation_peak(twin, xt, gt, 1), torch_activation_peak(twin, xt, gt, k))
        fns["torch plain"] = lambda: torch_step(twin, xt, gt, 1)
        fns["torch sqrt"] = lambda: torch_step(twin, xt, gt, k)
    with one_thread():
        times = interleaved_times(fns, repeats=repeats, warmup=1, clock=time.process_time)
    tm_ratio = times["tinymem sqrt"] / times["tinymem plain"]
    rows.append({"framework": "tinymem", "layers": depth, "width": width, "batch": size, "segments": k,
                 "act_plain_MiB": plain / 2**20, "act_sqrt_MiB": ckpt / 2**20, "act_ratio": ckpt / plain,
                 "step_plain_ms": times["tinymem plain"] * 1e3, "step_sqrt_ms": times["tinymem sqrt"] * 1e3,
                 "time_ratio": tm_ratio})
    if torch is not None:
        torch_ratio = times["torch sqrt"] / times["torch plain"]
        rows.append({"framework": "torch", "layers": depth, "width": width, "batch": size, "segments": k,
                     "act_plain_MiB": torch_mem[0] / 2**20, "act_sqrt_MiB": torch_mem[1] / 2**20,
                     "act_ratio": torch_mem[1] / torch_mem[0],
                     "step_plain_ms": times["torch plain"] * 1e3, "step_sqrt_ms": times["torch sqrt"] * 1e3,
                     "time_ratio": torch_ratio})
        rows.append({"framework": "tinymem / torch", "time_ratio": tm_ratio / torch_ratio,
                     "extra_time_ratio": (tm_ratio - 1) / (torch_ratio - 1) if torch_ratio > 1 else None})
    return rows
