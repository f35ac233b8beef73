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
from ..experiments.precision_steps import MODES, SIZES, step_memory, train_steps
from ..measure.timing import interleaved_times

NAME = "precision"
DESCRIPTION = "fp32 vs fp16/bf16 (fp32 masters): measured peak on an activation-dominated MLP; torch autocast"


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


def run(quick=False, device=None):
    width, depth, batch = SIZES["quick" if quick else "full"]
    rows, mem = [], {}
    for mode in MODES:
        mem[mode] = step_memory(mode, width, depth, batch, device=device)
    # Times in turns, so machine load hits every mode alike.
    steps = {mode: train_steps(mode, width, depth, batch, 1, device)[2] for mode in MODES}
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
