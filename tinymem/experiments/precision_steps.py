"""Training steps of the precision figures and benchmark: an activation-dominated MLP in fp32,
fp16 or bf16 (fp32 masters), built inside the tracking window so the peak counts everything:
half parameters and gradients, the fp32 masters and Adam's state, the step's fp32 master gradients.

Model: MLP 64 -> W x depth -> 10 with LayerNorm and GELU (each block saves its Linear input,
LayerNorm's x-hat and 1/std, and GELU's input: about 3 saved B x W arrays per block), Adam.
"""
import time

import numpy as np

from .. import data, memory, models, optim, random
from .. import functional as F
from ..autograd import Tensor
from ..techniques import precision


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
    return Tensor(x_np[idx], device=device), Tensor(y_np[idx], device=device)


def train_steps(mode, width, depth, batch, steps, device, xy=None):
    """Build the model in ``mode`` and run ``steps`` steps; returns (model, optimizer, step, losses).

    ``mode`` is one of :data:`MODES` or a :class:`~tinymem.techniques.precision.formats.HalfFormat`
    (the benchmark passes one whose codecs do nothing, to time the rest of the machinery)."""
    x, y = xy if xy is not None else _batch(batch, device)
    random.manual_seed(0)
    model = _model(width, depth, device)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    scaler = precision.GradScaler(enabled=getattr(mode, "name", mode) == "float16")
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


def step_memory(mode, width=32, depth=64, batch=2048, steps=2, device=None):
    """Peaks of ``steps`` training steps in ``mode``, model and optimizer built in the window."""
    xy = _batch(batch, device)  # the data is not part of the step's memory
    # No timeline: its event list would itself show up in the allocator's measurement.
    start = time.perf_counter()
    with memory.track(device=device, timeline=False) as t:
        model, opt, _, losses = train_steps(mode, width, depth, batch, steps, device, xy)
        n_params = model.num_parameters()
    seconds = time.perf_counter() - start
    return {"mode": mode, "width": width, "depth": depth, "batch": batch, "params": n_params,
            "ledger_peak": t.peak_delta(), "peak_by_bucket": t.peak_by_bucket(),
            "max_by_bucket": t.max_by_bucket(), "measured_peak": t.measured_peak(),
            "loss": losses[-1], "seconds_with_tracemalloc": seconds}
