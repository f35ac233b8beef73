"""The GPU speed targets (``tinymem bench targets --device cuda``): each row a ratio measured in
turns in one run, written to ``figures/data/bench_cuda.json`` and drawn in ``bench_cuda.png``.

Rows (MLP 4 x Linear(4096) with ReLU, batch 4096, Adam unless said; subject / baseline, target):
    fp16        fp16 storage step / tinymem fp32 step                                      <= 0.5
    fp16_torch  fp16 storage step / PyTorch's autocast fp16 step, same GPU                 <= 2
    bf16        bf16 storage step / tinymem fp32 step                                      <= 1.1
    adam8bit    Adam8bit step / Adam step (optimizer step alone)                           <= 3
    mlp         SGD step / PyTorch's SGD step                                              <= 1.1
    tiny_op     one recorded ``a * b`` on 8 x 8 floats / PyTorch CUDA                      <= 2
    checkpoint  sqrt(n) segments / plain, 64 x Linear(1024), batch 1024   <= PyTorch's ratio, same run
    ledger      the ledger's peak growth / the pool's used-bytes peak growth (CuPy's
                ``used_bytes()`` read at every allocation), one Adam step               in [0.95, 1.05]
                (the row also records whether ``measured_peak()`` equals the pool's peak)

How: wall-clock time around each call and a device synchronize (the GPU runs queued kernels
after the call returns), subject and baseline back to back, the order flipping every round.
Rows are measured one after the other and handed to ``on_row`` as each finishes (``tinymem
bench`` writes the JSON then), so a run killed halfway keeps the rows it finished; a row that
raises is recorded as an error row (``error``: the exception, ``met`` False) and the next row
runs. With ``device="cpu"`` the same rows run on NumPy and PyTorch's CPU build, with
tracemalloc as the allocator: a dry run of the code (``quick`` shrinks every shape).
"""
import time

import numpy as np

from .. import backend, functional as F, memory, models, optim
from ..autograd import Tensor
from ..experiments.checkpoint_nets import batch as ckpt_batch
from ..experiments.checkpoint_nets import deep_mlp, step as ckpt_step, torch_twin
from ..techniques.checkpoint import resolve_segments
from ..techniques.precision import half
from .targets import Row, summary

CLOCK = "wall clock with a device synchronize after each call"
LEDGER_BAND = (0.95, 1.05)


def _shapes(quick):
    """(width, batch, layers) of the MLP and (depth, width, batch) of the checkpointed net."""
    return ((64, 32, 4), (8, 32, 16)) if quick else ((4096, 4096, 4), (64, 1024, 1024))


class _Device:
    def __init__(self, device, torch):
        self.name, self.torch = backend.check_device(device), torch
        self.torch_device = "cuda" if self.name == "cuda" else "cpu"

    def sync(self):
        if self.name == "cuda":
            backend.get_cupy().cuda.Device().synchronize()
            self.torch.cuda.synchronize()

    def timed(self, fn, inner):
        self.sync()
        start = time.perf_counter()
        for _ in range(inner):
            fn()
        self.sync()
        return (time.perf_counter() - start) / inner


def _mlp(dev, opt_name, quick, **kw):
    width, size, depth = _shapes(quick)[0]
    rng = np.random.default_rng(0)
    model = models.MLP([width] * (depth + 1), device=dev.name)
    opt = getattr(optim, opt_name)(model.parameters(), **kw)
    x = Tensor(rng.standard_normal((size, width)).astype(np.float32), device=dev.name)
    y = Tensor(rng.integers(0, width, size), device=dev.name)
    return model, opt, x, y


def _step(model, opt, x, y):
    opt.zero_grad()
    F.cross_entropy(model(x), y).backward()
    opt.step()
    return opt


def _torch_mlp(dev, quick, opt_name, autocast=None):
    torch = dev.torch
    width, size, depth = _shapes(quick)[0]
    torch.manual_seed(0)
    layers = []
    for i in range(depth):
        layers += [torch.nn.Linear(width, width)] + ([torch.nn.ReLU()] if i < depth - 1 else [])
    model = torch.nn.Sequential(*layers).to(dev.torch_device)
    opt = getattr(torch.optim, opt_name)(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((size, width)).astype(np.float32)).to(dev.torch_device)
    y = torch.from_numpy(rng.integers(0, width, size)).to(dev.torch_device)

    def step():
        opt.zero_grad()
        if autocast is None:
            loss = torch.nn.functional.cross_entropy(model(x), y)
        else:
            with torch.autocast(dev.torch_device, dtype=autocast):
                loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return step


def _precision_rows(dev, quick):
    fp32 = _mlp(dev, "Adam", quick, lr=1e-3)
    halves = {}
    for dtype in ("float16", "bfloat16"):
        model, opt, x, y = _mlp(dev, "Adam", quick, lr=1e-3)
        hm, hopt = half(model, opt, dtype=dtype)
        halves[dtype] = (hm, hopt, x, y)
    width, size, depth = _shapes(quick)[0]
    what = f"storage step vs tinymem's fp32 step, MLP {depth} x {width}, batch {size}, Adam"
    autocast = _torch_mlp(dev, quick, "Adam", autocast=dev.torch.float16)
    fp16, bf16 = (lambda: _step(*halves["float16"])), (lambda: _step(*halves["bfloat16"]))
    return [Row("fp16", "fp16 storage / fp32", "fp16 " + what, 0.5, {"tinymem": (fp16, lambda: _step(*fp32))}),
            Row("fp16_torch", "fp16 storage / PyTorch autocast",
                "fp16 storage step vs PyTorch's autocast fp16 step, same MLP", 2.0, {"tinymem": (fp16, autocast)}),
            Row("bf16", "bf16 storage / fp32", "bf16 " + what, 1.1, {"tinymem": (bf16, lambda: _step(*fp32))})]


def _optimizer_rows(dev, quick):
    steppers = {}
    for name in ("Adam", "Adam8bit"):
        model, opt, x, y = _mlp(dev, name, quick, lr=1e-4)
        F.cross_entropy(model(x), y).backward()
        opt.step()  # the state exists before timing starts
        steppers[name] = opt.step
    sgd = _mlp(dev, "SGD", quick, lr=1e-3)
    return [Row("adam8bit", "Adam8bit / Adam", "Adam8bit step vs Adam step, the MLP's parameters", 3.0,
                {"tinymem": (steppers["Adam8bit"], steppers["Adam"])}),
            Row("mlp", "MLP step / PyTorch", "MLP SGD step vs PyTorch's", 1.1,
                {"tinymem": (lambda: _step(*sgd), _torch_mlp(dev, quick, "SGD"))})]


def _tiny_op_row(dev):
    torch = dev.torch
    ones = np.ones((8, 8), np.float32)
    a, b = Tensor(ones, device=dev.name, requires_grad=True), Tensor(ones, device=dev.name)
    ta = torch.ones(8, 8, device=dev.torch_device, requires_grad=True)
    tb = torch.ones(8, 8, device=dev.torch_device)
    return Row("tiny_op", "tiny op / PyTorch", "one recorded tiny op (a * b, 8 x 8 floats) vs PyTorch", 2.0,
               {"tinymem": (lambda: a * b, lambda: ta * tb)}, inner=200)


def _checkpoint_row(dev, quick):
    torch = dev.torch
    depth, width, size = _shapes(quick)[1]
    model = deep_mlp(depth, width, dev.name)
    x, grad = ckpt_batch(model, size, dev.name)
    k = resolve_segments("sqrt", depth)
    twin = torch_twin(model).to(dev.torch_device)
    xt = torch.tensor(backend.to_numpy(x.data), device=dev.torch_device, requires_grad=True)
    gt = torch.ones_like(xt)

    def torch_step(segments):
        from torch.utils.checkpoint import checkpoint_sequential
        out = twin(xt) if segments == 1 else checkpoint_sequential(twin, segments, xt, use_reentrant=False)
        out.backward(gt)

    pairs = {"tinymem": (lambda: ckpt_step(model, x, grad, ("segments", k)), lambda: ckpt_step(model, x, grad, ("none", 0))),
             "torch": (lambda: torch_step(k), lambda: torch_step(1))}
    return Row("checkpoint", "sqrt(n) checkpoint / plain", f"sqrt(n) checkpointing vs plain, {depth}x Linear({width}), "
               f"batch {size}", None, pairs, target_from="torch")


def ledger_row(device, quick):
    """The ledger's peak growth over one warm Adam step against the allocator's: CuPy's pool
    read at every allocation by a hook of this row's own, or tracemalloc on the CPU."""
    model, opt, x, y = _mlp(_Device(device, None), "Adam", quick, lr=1e-3)
    _step(model, opt, x, y)
    state = {}
    if device == "cuda":
        cupy = backend.get_cupy()
        pool = cupy.get_default_memory_pool()

        class Reader(cupy.cuda.MemoryHook):
            name = "tinymem_bench_pool_peak"

            def malloc_postprocess(self, **kwargs):
                state["high"] = max(state["high"], pool.used_bytes())

        state["base"] = state["high"] = pool.used_bytes()
        with Reader(), memory.track(device=device) as t:
            _step(model, opt, x, y)
        allocator = state["high"] - state["base"]
    else:
        with memory.track(device=device) as t:
            _step(model, opt, x, y)
        allocator = t.measured_peak()
    ratio = t.peak_delta() / max(allocator, 1)
    stats = summary([ratio])
    return {"key": "ledger", "label": "ledger / allocator peak", "what": "the ledger's peak growth vs the allocator's "
            "(CuPy's pool used bytes, read at every allocation), one Adam step of the MLP", "rounds": 1,
            "band": list(LEDGER_BAND), "target": LEDGER_BAND[1], "met": bool(LEDGER_BAND[0] <= ratio <= LEDGER_BAND[1]),
            "ledger_peak": int(t.peak_delta()), "allocator_peak": int(allocator), "measured_peak": int(t.measured_peak()),
            "measured_equals_allocator": bool(t.measured_peak() == allocator),
            "contenders": {"tinymem": dict(stats, ratios=[ratio])}}


def _measure(dev, row, rounds):
    """One row's record: a warm-up call of each function (first-use allocations, kernel
    compilation, caches), then ``rounds`` rounds, subject and baseline back to back."""
    for subject, baseline in row.pairs.values():
        subject(), baseline()
    times = {c: ([], []) for c in row.pairs}
    for i in range(rounds):
        for contender, fns in row.pairs.items():
            for slot in ((0, 1) if i % 2 == 0 else (1, 0)):
                times[contender][slot].append(dev.timed(fns[slot], row.inner))
    entry = {"key": row.key, "label": row.label, "what": row.what, "rounds": rounds, "contenders": {}}
    for contender, (subject, baseline) in times.items():
        ratios = list(np.divide(subject, baseline))
        entry["contenders"][contender] = dict(summary(ratios), ratios=ratios, subject_s=float(np.median(subject)),
                                              baseline_s=float(np.median(baseline)))
    entry["target"] = row.target if row.target_from is None else entry["contenders"][row.target_from]["median"]
    entry["met"] = bool(entry["contenders"]["tinymem"]["median"] <= entry["target"])
    return entry


def error_row(key, exc, label=None, what=None, target=None):
    """The record of a row that raised: what it was, the exception, not met."""
    return {"key": key, "label": label or key, "what": what or key, "rounds": 0, "target": target, "met": False,
            "error": f"{type(exc).__name__}: {exc}", "contenders": {}}


def _builders(dev, quick):
    """(the keys a builder makes, the builder): a builder that raises costs its own rows only."""
    return [(("fp16", "fp16_torch", "bf16"), lambda: _precision_rows(dev, quick)),
            (("adam8bit", "mlp"), lambda: _optimizer_rows(dev, quick)),
            (("tiny_op",), lambda: [_tiny_op_row(dev)]),
            (("checkpoint",), lambda: [_checkpoint_row(dev, quick)])]


def run(quick=False, device="cuda", rounds=None, on_row=None):
    """Measure every row on ``device``; returns the records (without ``meta``). ``on_row(records)``
    is called after each row with the records so far."""
    import torch
    dev = _Device(device, torch)
    rounds = rounds or (2 if quick else 9)
    records = {"rows": [], "rounds": rounds, "clock": CLOCK, "device": device}

    def add(entry):
        records["rows"].append(entry)
        if on_row is not None:
            on_row(records)

    # Any exception of one row (a CUDA error, an out-of-memory, a bug) is its row's record: the
    # first GPU run lost every row to one.
    for keys, build in _builders(dev, quick):
        try:
            rows = build()
        except Exception as exc:  # noqa: BLE001
            for key in keys:
                add(error_row(key, exc))
            continue
        for row in rows:
            try:
                entry = _measure(dev, row, rounds)
            except Exception as exc:  # noqa: BLE001
                entry = error_row(row.key, exc, row.label, row.what, row.target)
            # Outside the try: an on_row that raises (a write that failed) is no error of the
            # row, which it recorded twice, once measured and once as that error.
            add(entry)
    try:
        entry = ledger_row(device, quick)
    except Exception as exc:  # noqa: BLE001
        entry = error_row("ledger", exc, "ledger / allocator peak", target=LEDGER_BAND[1])
    add(entry)
    return records


def writer(outdir, quick, device="cuda"):
    """An ``on_row`` that writes ``outdir/data/bench_cuda.json`` (atomically) after every row,
    with the run's ``meta``, and prints the row's line."""
    from ..measure.records import meta, write_records
    stamp = meta(device, quick)

    def on_row(records):
        row = table_rows({"rows": records["rows"][-1:]})[0]
        print(f"  {row['row']:<12} {row['tinymem x']!s:>10} target {row['target']}  met {row['met']}", flush=True)
        write_records(dict(records, meta=stamp), outdir, "bench_cuda")
    return on_row


def table_rows(records):
    """Printable rows: each row's tinymem median, PyTorch's where measured, the target, met."""
    out = []
    for row in records["rows"]:
        if "error" in row:
            out.append({"row": row["key"], "tinymem x": "error", "torch x": "-", "target": "-", "met": False})
            continue
        mine, theirs = row["contenders"]["tinymem"], row["contenders"].get("torch")
        target = f"{row['band'][0]}-{row['band'][1]}" if "band" in row else f"<= {row['target']:.2f}"
        out.append({"row": row["key"], "tinymem x": mine["median"], "torch x": theirs["median"] if theirs else "-",
                    "target": target, "met": row["met"]})
    return out
