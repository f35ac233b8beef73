"""Mixed precision on an activation-dominated model: measured peak memory, fp32 vs fp16 vs bf16.

Model: MLP 64 -> W x depth -> 10 with LayerNorm and GELU (each block saves its Linear input,
LayerNorm's x-hat and 1/std, and GELU's input: about 3 saved B x W arrays per block), Adam,
batch B. Each mode builds the model and optimizer *inside* the tracking window and runs two
steps, so the peak counts everything: half parameters and gradients, the fp32 masters and
Adam's state (``optimizer`` bucket), the transient fp32 master gradients of the step.

Reported side by side from one run: the ledger peak, the allocator's measured peak
(tracemalloc on NumPy, the CuPy pool on a GPU), their ratio to fp32, and the step time ratio
(on the CPU half precision costs time: upcasts, no fp16 BLAS). When PyTorch is installed, the
same model in PyTorch fp32 and under ``torch.autocast("cpu", torch.bfloat16)``: bytes saved for
backward (counted once per storage by a saved-tensors hook) and step time, for comparison.
"""
import time

import numpy as np

from .. import data, memory, models, optim, random
from .. import functional as F
from ..techniques import precision
from ._timing import interleaved_times

NAME = "precision"
DESCRIPTION = "fp32 vs fp16/bf16 (fp32 masters): measured peak on an activation-dominated MLP; torch autocast"

MODES = ("float32", "float16", "bfloat16")
# (width, depth, batch). Deep and narrow with a large batch: the saved activations (3 arrays of
# B x W per block) dwarf the parameters and Adam's state, and the per-op float32 temporaries
# of CPU compute (a few B x W arrays, independent of depth) are small next to them.
SIZES = {"quick": (32, 8, 256), "full": (32, 64, 4096)}


def _model(width, depth, device):
    return models.MLP([64] + [width] * depth + [10], activation="gelu", layernorm=True, device=device)


def _batch(batch, device):
    x_np, y_np, _, _ = data.load_digits()
    idx = np.random.default_rng(0).integers(0, len(x_np), batch)
    return data.Tensor(x_np[idx], device=device), data.Tensor(y_np[idx], device=device)


def _train_steps(mode, width, depth, batch, steps, device, xy=None):
    x, y = xy if xy is not None else _batch(batch, device)
    random.manual_seed(0)
    model = _model(width, depth, device)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    scaler = precision.GradScaler(enabled=mode == "float16")
    run = model
    if mode != "float32":
        run, opt = precision.half(model, opt, dtype=mode)

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(run(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        return loss.item()

    losses = [step() for _ in range(steps)]
    return model, opt, step, losses


def step_memory(mode, width=32, depth=64, batch=2048, steps=2, device="cpu"):
    """Peaks of ``steps`` training steps in ``mode``, model and optimizer built in the window."""
    xy = _batch(batch, device)  # the data is not part of the step's memory
    # No timeline: its event list would itself show up in the allocator's measurement.
    start = time.perf_counter()
    with memory.track(device=device, timeline=False) as t:
        model, opt, _, losses = _train_steps(mode, width, depth, batch, steps, device, xy)
        n_params = model.num_parameters()
    seconds = time.perf_counter() - start
    return {"mode": mode, "width": width, "depth": depth, "batch": batch, "params": n_params,
            "ledger_peak": t.peak_delta(), "peak_by_bucket": t.peak_by_bucket(),
            "max_by_bucket": t.max_by_bucket(), "measured_peak": t.measured_peak(),
            "loss": losses[-1], "seconds_with_tracemalloc": seconds}


def torch_reference(width=32, depth=64, batch=2048, repeats=3):
    """PyTorch fp32 and CPU bf16 autocast: bytes saved for backward (parameters excluded, each
    storage once) and step time, the two modes timed in turns."""
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Linear(64, width)]
    for i in range(depth):
        layers += [torch.nn.LayerNorm(width), torch.nn.GELU(approximate="tanh"),
                   torch.nn.Linear(width, width if i < depth - 1 else 10)]
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    x = torch.randn(batch, 64)
    y = torch.randint(0, 10, (batch,))

    def forward(autocast):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            return torch.nn.functional.cross_entropy(model(x).float(), y)

    def step(autocast):
        opt.zero_grad()
        forward(autocast).backward()
        opt.step()

    out = {}
    modes = {"torch float32": False, "torch bf16 autocast": True}
    for name, autocast in modes.items():
        seen = {}

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in params:
                seen[storage.data_ptr()] = storage.nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = forward(autocast)
        del loss
        out[name] = {"saved_bytes": sum(seen.values())}
    times = interleaved_times({name: (lambda a=a: step(a)) for name, a in modes.items()}, repeats=repeats)
    for name in modes:
        out[name]["step_s"] = times[name]
    return out


def run(quick=False, device="cpu"):
    width, depth, batch = SIZES["quick" if quick else "full"]
    rows, mem = [], {}
    for mode in MODES:
        mem[mode] = step_memory(mode, width, depth, batch, device=device)
    # Times in turns, so machine load hits every mode alike.
    steps = {mode: _train_steps(mode, width, depth, batch, 1, device)[2] for mode in MODES}
    times = interleaved_times(steps, repeats=2 if quick else 3, warmup=0)
    base = mem["float32"]
    for mode in MODES:
        r = mem[mode]
        rows.append({"mode": mode, "batch": batch, "width": width, "depth": depth,
                     "ledger peak MiB": r["ledger_peak"] / 2**20,
                     "measured peak MiB": r["measured_peak"] / 2**20,
                     "ledger x fp32": r["ledger_peak"] / base["ledger_peak"],
                     "measured x fp32": r["measured_peak"] / base["measured_peak"],
                     "activation MiB": r["max_by_bucket"]["activation"] / 2**20,
                     "step ms": times[mode] * 1e3, "time x fp32": times[mode] / times["float32"]})
    try:
        ref = torch_reference(width, depth, batch, repeats=2 if quick else 3)
    except ImportError:
        ref = {}
    for name, r in ref.items():
        rows.append({"mode": name, "batch": batch, "width": width, "depth": depth,
                     "activation MiB": r["saved_bytes"] / 2**20, "step ms": r["step_s"] * 1e3,
                     "time x fp32": r["step_s"] / ref["torch float32"]["step_s"]})
    return rows
