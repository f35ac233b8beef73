"""The speed targets: each row a time ratio against its baseline, measured in turns in one run.

Rows (subject / baseline, target):
    mlp          MLP 4 x 1024, batch 256, SGD step / the same step in hand-written NumPy   <= 1.05
    tiny_op      one recorded ``a * b`` on 4 floats / PyTorch eager, requires_grad        <= 2
    adam8bit     Adam8bit step / Adam step, 1024 x 1024 parameter                         <= 3
    lion         Lion step / Adam step, same parameter                                    <= 1.1
    fp16         fp16 storage (fp32 compute) step / fp32 step, activation-heavy MLP       <= 1.7
    fp16_machinery   the same with identity codecs / fp32 (no target: what is not conversion)
    bf16         bf16 storage step / fp32 step, same MLP                                  <= 1.4
    fp16_encode, fp16_astype, bf16_encode   one encode of an activation / one elementwise pass
                 over it (no target: a conversion's cost in passes; astype is NumPy's own)
    checkpoint   sqrt(n) segments / plain, 64 x Linear(512), batch 128   <= PyTorch's ratio, same run
    checkpoint_forward   that model's forward, tinymem / PyTorch (no target: what a recomputation costs)
    linear_matmul  one of its matmuls, NumPy ``x @ w.T`` / PyTorch ``F.linear`` (no target: the BLAS)
    offload      save_on_host / plain, 8 x Linear(384), batch 2048                        <= 1.02

How: every function runs on one thread (NumPy's BLAS and PyTorch) and is timed in CPU seconds of
the process (``time.process_time``), which on a shared machine follows the work done rather
than the share of the cores obtained. (On more BLAS threads the matmuls shrink and the
engine's fixed Python cost weighs more in the MLP row; on a 2-core machine shared with other
jobs such wall-clock ratios swing by tens of percent, so they are not what the table records.) A round times subject and baseline back to back (the
order flips every round) and keeps their ratio; a row reports the median ratio over its rounds
and the spread (first and third quartile, min, max). Rows take turns too: round 1 of every row,
then round 2, ..., so a burst of load elsewhere touches all rows alike.
"""
import contextlib
import time

import numpy as np

from .. import optim
from ..autograd import Tensor
from ..experiments import offload as offload_exp
from ..experiments import precision_steps
from ..experiments.checkpoint_nets import batch as ckpt_batch
from ..experiments.checkpoint_nets import deep_mlp, one_thread, step as ckpt_step, torch_step, torch_twin
from ..nn import Parameter
from ..techniques.checkpoint import resolve_segments
from ..techniques.precision.formats import HalfFormat

NAME = "targets"
DESCRIPTION = "the speed targets: each row a ratio to its baseline, median and spread of rounds in turns"


class Row:
    """One line of the table: ``pairs`` maps a contender to (subject, baseline) callables."""

    def __init__(self, key, label, what, target, pairs, inner=1, target_from=None):
        self.key, self.label, self.what, self.target, self.pairs = key, label, what, target, pairs
        self.inner = inner              # calls per timing, for functions of a few microseconds
        self.target_from = target_from  # a contender whose median ratio is the target


def _mlp_row(quick):
    from .engine import mlp_problem
    (width, size, depth), _, _, _, tinymem_step, numpy_step = mlp_problem(quick)
    return Row("mlp", "MLP step / NumPy", f"MLP {depth}x{width}, batch {size}, SGD step vs hand-written NumPy", 1.05,
               {"tinymem": (tinymem_step, numpy_step)})


def _tiny_op_row(torch):
    a, b = Tensor(np.ones(4, np.float32), requires_grad=True), Tensor(np.ones(4, np.float32))
    ta, tb = torch.ones(4, requires_grad=True), torch.ones(4)
    return Row("tiny_op", "tiny op / PyTorch", "one recorded tiny op (a * b, 4 floats) vs PyTorch eager", 2.0,
               {"tinymem": (lambda: a * b, lambda: ta * tb)}, inner=2000)


def _optimizer_rows(quick):
    n = 256 if quick else 1024
    rng = np.random.default_rng(0)
    init = rng.standard_normal((n, n)).astype(np.float32) * 0.02
    grad = rng.standard_normal((n, n)).astype(np.float32) * 1e-3

    def stepper(name):
        p = Parameter(init.copy())
        p.grad = grad.copy()
        opt = getattr(optim, name)([p])
        opt.step()  # state exists before timing starts
        return opt.step

    adam = stepper("Adam")
    return [Row("adam8bit", "Adam8bit / Adam", f"Adam8bit step vs Adam step ({n * n:,} parameters)", 3.0,
                {"tinymem": (stepper("Adam8bit"), adam)}, inner=2),
            Row("lion", "Lion / Adam", "Lion step vs Adam step", 1.1, {"tinymem": (stepper("Lion"), adam)}, inner=2)]


def _precision_rows(quick):
    width, depth, size = (32, 8, 256) if quick else (32, 32, 4096)
    xy = precision_steps._batch(size, "cpu")
    steps = {mode: precision_steps.train_steps(mode, width, depth, size, 1, "cpu", xy)[2]
             for mode in precision_steps.MODES}
    what = f"storage step vs fp32, MLP {depth}x{width} with LayerNorm+GELU, batch {size}"
    # Where the fp16 row's time goes: the same mixed-precision step with codecs that do nothing
    # (no row target): its ratio is the machinery (upcasts, hooks, masters, loss scaling), the
    # rest of the fp16 row's ratio is the conversions themselves.
    machinery = precision_steps.train_steps(_CodecFree(), width, depth, size, 1, "cpu", xy)[2]
    # The CPU's floors: NumPy has no one-pass half cast (astype(float16) costs about 20 passes,
    # ml_dtypes' bfloat16 about 7), so a conversion costs several passes however it is written.
    return [Row("fp16", "fp16 storage / fp32", "fp16 " + what, 1.7, {"tinymem": (steps["float16"], steps["float32"])}),
            Row("fp16_machinery", "fp16, no conversions / fp32",
                "fp16 storage with conversions skipped (the machinery alone) vs fp32, same MLP", None,
                {"tinymem": (machinery, steps["float32"])}),
            Row("bf16", "bf16 storage / fp32", "bf16 " + what, 1.4, {"tinymem": (steps["bfloat16"], steps["float32"])})
            ] + _codec_rows(size, width)


CODEC_ROWS = ("fp16_encode", "fp16_astype", "bf16_encode")


def _codec_rows(size, width):
    """What one conversion costs, in passes: encoding one saved activation (``size`` x ``width``
    float32) against one elementwise pass over it (``x * 2`` into a buffer), for the bit codecs
    and for NumPy's own ``astype(float16)``. No targets: they say how far from one pass each
    conversion is (every step of bit arithmetic is one NumPy pass)."""
    x = np.random.default_rng(0).standard_normal((size, width)).astype(np.float32)
    buffer, two = np.empty_like(x), np.float32(2.0)

    def one_pass():
        np.multiply(x, two, out=buffer)

    fp16, bf16 = HalfFormat("float16", np.float16), HalfFormat("bfloat16", np.uint16)
    shape = f"{size}x{width} float32"
    return [Row("fp16_encode", "fp16 encode / one pass", f"float16 encode (bit codec) of one {shape} activation "
                "vs one elementwise pass over it", None, {"tinymem": (lambda: fp16.encode(x), one_pass)}, inner=20),
            Row("fp16_astype", "astype(float16) / one pass", f"NumPy's x.astype(float16) of the same {shape} "
                "vs one elementwise pass", None, {"tinymem": (lambda: x.astype(np.float16), one_pass)}, inner=20),
            Row("bf16_encode", "bf16 encode / one pass", f"bfloat16 encode (bit codec) of the same {shape} "
                "vs one elementwise pass", None, {"tinymem": (lambda: bf16.encode(x), one_pass)}, inner=20)]


class _CodecFree(HalfFormat):
    """float16's machinery with identity codecs: values stay float32 (a diagnostic, not a format)."""

    def __init__(self):
        super().__init__("float16", np.float32)

    def encode(self, x):
        return x

    def decode(self, stored, dtype=np.float32):
        return stored if stored.dtype == dtype else stored.astype(dtype)

    def round(self, x):
        return x


def _checkpoint_row(quick, torch):
    depth, width, size = (16, 128, 32) if quick else (64, 512, 128)
    model = deep_mlp(depth, width)
    x, grad = ckpt_batch(model, size)
    k = resolve_segments("sqrt", depth)
    pairs = {"tinymem": (lambda: ckpt_step(model, x, grad, ("segments", k)),
                         lambda: ckpt_step(model, x, grad, ("none", 0)))}
    if torch is not None:
        twin = torch_twin(model)
        xt, gt = torch.tensor(x.numpy(), requires_grad=True), torch.from_numpy(grad)
        pairs["torch"] = (lambda: torch_step(twin, xt, gt, k), lambda: torch_step(twin, xt, gt, 1))
    # Two steps per timing: PyTorch's ratio is this row's target, and with one step a round's
    # ratio swung by +-0.1 (quartiles 1.20-1.39 on 15 rounds), more than the effect compared.
    rows = [Row("checkpoint", "sqrt(n) checkpoint / plain", f"sqrt(n) checkpointing vs plain, {depth}x Linear({width}), batch {size}",
                None, pairs, inner=2, target_from="torch" if torch is not None else None)]
    if torch is not None:
        # What checkpointing adds is one more forward of most blocks: its cost is each engine's
        # forward, so the two rows' extra times differ as their forwards do (no target).
        rows.append(Row("checkpoint_forward", "forward, tinymem / PyTorch",
                        f"the forward that recomputation repeats ({depth}x Linear({width}) + ReLU, graph recorded), "
                        "tinymem vs PyTorch", None, {"tinymem": (lambda: model(x), lambda: twin(xt))}, inner=2))
        # Below the engine: the matmul tinymem's Linear calls, bare NumPy, against PyTorch's at the
        # same shape (no bias, no graph). OpenBLAS packs the transposed weight of ``x @ w.T``
        # more slowly than MKL does; the forward row above cannot be faster than this one.
        w = model[0][0].weight.data
        wt, xd = torch.from_numpy(w), torch.from_numpy(x.data)
        rows.append(Row("linear_matmul", "matmul, NumPy / PyTorch",
                        f"one of those matmuls, NumPy x @ w.T vs PyTorch F.linear (no bias), {size}x{width} by "
                        f"{width}x{width}", None,
                        {"tinymem": (lambda: x.data @ w.T, lambda: torch.nn.functional.linear(xd, wt))}, inner=20))
    return rows


def _offload_row(quick, torch):
    from ..techniques import offload
    cfg = offload_exp.config(quick)
    model, x, y = offload_exp.make_problem(cfg, "cpu")
    opt = optim.SGD(model.parameters(), lr=1e-3)

    def step(host):
        ctx = offload.save_on_host(prefetch=0) if host else offload_exp.activation_context("none", None)
        offload_exp.train_step(model, opt, x, y, ctx)

    pairs = {"tinymem": (lambda: step(True), lambda: step(False))}
    if torch is not None:
        pairs["torch"] = _torch_offload_pair(cfg, torch)
    sizes = cfg["sizes"]
    return Row("offload", "host offload / plain", f"activation offload to host vs plain, {len(sizes) - 2}x Linear({sizes[1]}), "
               f"batch {cfg['batch']}", 1.02, pairs)


def _torch_offload_pair(cfg, torch):
    torch.manual_seed(0)
    sizes = cfg["sizes"]
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers += [torch.nn.Linear(a, b)] + ([torch.nn.Tanh()] if i < len(sizes) - 2 else [])
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((cfg["batch"], sizes[0])).astype(np.float32))
    y = torch.from_numpy(rng.integers(0, sizes[-1], cfg["batch"]))

    def step(offloaded):
        opt.zero_grad()
        with torch.autograd.graph.save_on_cpu(pin_memory=False) if offloaded else contextlib.nullcontext():
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()

    return (lambda: step(True)), (lambda: step(False))


def build_rows(quick=False, only=None):
    """The rows of the table (built, warmed up by nothing yet); ``only`` keeps some keys."""
    try:
        import torch
    except ImportError:
        torch = None
    builders = [("mlp", lambda: [_mlp_row(quick)]),
                ("tiny_op", lambda: [_tiny_op_row(torch)] if torch is not None else []),
                ("adam8bit", lambda: _optimizer_rows(quick)), ("lion", lambda: []),
                ("fp16", lambda: _precision_rows(quick)), ("bf16", lambda: []),
                ("checkpoint", lambda: _checkpoint_row(quick, torch)),
                ("offload", lambda: [_offload_row(quick, torch)])]
    rows = [row for _, build in builders for row in build()]
    return [r for r in rows if only is None or r.key in only]


def _timed(fn, inner):
    start = time.process_time()
    for _ in range(inner):
        fn()
    return (time.process_time() - start) / inner


def measure(rows, rounds):
    """``{row key: {contender: [ratio per round]}}`` and seconds per call, rows taking turns."""
    for row in rows:  # one warm-up call of everything (first-use allocations, caches)
        for subject, baseline in row.pairs.values():
            subject(), baseline()
    ratios = {r.key: {c: [] for c in r.pairs} for r in rows}
    seconds = {r.key: {c: ([], []) for c in r.pairs} for r in rows}
    for i in range(rounds):
        for row in rows:
            for contender, (subject, baseline) in row.pairs.items():
                order = ((subject, 0), (baseline, 1)) if i % 2 == 0 else ((baseline, 1), (subject, 0))
                t = [0.0, 0.0]
                for fn, slot in order:
                    t[slot] = _timed(fn, row.inner)
                ratios[row.key][contender].append(t[0] / t[1])
                seconds[row.key][contender][0].append(t[0])
                seconds[row.key][contender][1].append(t[1])
    return ratios, seconds


def summary(values):
    q = np.percentile(values, [0, 25, 50, 75, 100])
    return {"median": float(q[2]), "q1": float(q[1]), "q3": float(q[3]), "min": float(q[0]), "max": float(q[4])}


def run(quick=False, only=None, rounds=None):
    """Measure every row; returns the records (without ``meta``) that ``tinymem bench`` writes."""
    rounds = rounds or (3 if quick else 15)
    with one_thread():
        rows = build_rows(quick, only)
        ratios, seconds = measure(rows, rounds)
    out = []
    for row in rows:
        entry = {"key": row.key, "label": row.label, "what": row.what, "rounds": rounds, "contenders": {}}
        for contender in row.pairs:
            subject, baseline = seconds[row.key][contender]
            entry["contenders"][contender] = dict(
                summary(ratios[row.key][contender]), ratios=ratios[row.key][contender],
                subject_s=float(np.median(subject)), baseline_s=float(np.median(baseline)),
                # The cost in seconds, beside the ratio: contenders with different baselines
                # (PyTorch's plain step is not tinymem's) compare by it too.
                extra_s=float(np.median(np.subtract(subject, baseline))))
        target = row.target
        if row.target_from is not None:
            target = entry["contenders"][row.target_from]["median"]
        entry["target"] = target
        mine = entry["contenders"]["tinymem"]["median"]
        entry["met"] = None if target is None else bool(mine <= target)
        out.append(entry)
    return {"rows": out, "rounds": rounds,
            "clock": "CPU time of the process, one thread"}


def table_rows(records):
    """Printable rows: each contender's median ratio, quartiles and the target."""
    out = []
    for row in records["rows"]:
        for contender, r in row["contenders"].items():
            out.append({"row": row["key"], "contender": contender, "median x": r["median"],
                        "q1": r["q1"], "q3": r["q3"], "subject ms": r["subject_s"] * 1e3,
                        "baseline ms": r["baseline_s"] * 1e3, "extra ms": r.get("extra_s", np.nan) * 1e3,
                        "target": "-" if row["target"] is None else row["target"],
                        "met": "-" if contender != "tinymem" or row["met"] is None else row["met"]})
    return out


def plot(records, outdir, name="bench.png"):
    """``bench.png`` (or ``name``): per row, tinymem's ratio (median, quartile box, min-max
    whisker) against its target line (two lines for a row with a ``band``), and PyTorch's ratio
    where the row has one. The codec rows (costs in passes, 10-30x) are left to the table: on
    the same axis they would squeeze every ratio near 1."""
    from .. import plots

    rows = [row for row in records["rows"] if row["key"] not in CODEC_ROWS and "error" not in row]
    fig, ax = plots.new_figure(width=8.0, height=0.55 * len(rows) + 1.6)
    # The medians as a column of labels right of every whisker and target line (a label next
    # to its own whisker can land on a target line).
    right = max([r["max"] for row in rows for r in row["contenders"].values()]
                + [row["target"] for row in rows if row["target"] is not None]) * 1.12
    for i, row in enumerate(rows):
        y = len(rows) - 1 - i
        for contender, dy, color in (("tinymem", 0.12, "#4c72b0"), ("torch", -0.18, "#dd8452")):
            r = row["contenders"].get(contender)
            if r is None:
                continue
            ax.plot([r["min"], r["max"]], [y + dy] * 2, color=color, lw=1)
            ax.plot([r["q1"], r["q3"]], [y + dy] * 2, color=color, lw=6, solid_capstyle="butt", alpha=0.6)
            ax.plot(r["median"], y + dy, "o", color=color, ms=5,
                    label=contender if i == 0 or (contender == "torch" and "torch" not in
                                                  [t.get_label() for t in ax.lines]) else None)
            ax.text(right, y + dy, f"{r['median']:.2f}x", va="center", fontsize=8, color=color)
        for target in row.get("band") or ([] if row["target"] is None else [row["target"]]):
            ax.plot([target] * 2, [y - 0.38, y + 0.38], color="#c44e52", lw=1.5,
                    label="target" if i == 0 and target == row["target"] else None)
    ax.axvline(1.0, color="#999999", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlim(right=right * 1.3)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([row["label"] for row in reversed(rows)], fontsize=8)
    ax.set_xlabel("time ratio to the row's baseline (log scale); a dot left of its red target line meets it")
    ax.set_title(f"speed targets: median of {records['rounds']} rounds in turns,\nbox = quartiles, "
                 f"line = min to max; {records['clock']}", fontsize=8)
    # Below the axes: any corner inside them holds some row's whisker on some run.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=3, fontsize=8, frameon=False)
    return [plots.save(fig, records, outdir, name)]
