"""Which technique stack fits a model on N GPUs of M bytes, how few GPUs each needs, what it costs.

:func:`stacks` adds one technique at a time, from plain data parallel to ZeRO-3 with ZeRO-Offload,
other optimizers and precisions, pipelines and a tensor-parallel layout; :func:`plan_arch`
resolves each once at the door (:func:`tinymem.planner.inputs.resolve`) and evaluates the
resolved value (:func:`evaluate`: :func:`tinymem.planner.terms.analytic.evaluate`, model states
counted by a :mod:`.conventions` convention; the search below never looks a name up again),
marks those whose peak fits ``gpu_memory`` and finds the fewest GPUs each needs, both from one
search (:func:`fewest_gpus`): a data-parallel stack's peak only falls as ranks are added (every
sharded term is bytes/N), so a bisection finds it; a pipeline's does not (a stage holds
ceil(L/p) layers, which jumps back up as p grows), so every stage count up to the layers is
tried. It proposes, of every combination of :func:`candidates` and every 3D layout
(:func:`layouts_3d`), the fitting one with the smallest time.

Time cost, relative to plain training on the same GPUs (a model, not a measurement):

    compute   forward F = L·(24·b·s·h² + 4·b·s²·h) + 2·b·s·h·V per micro-batch (SwiGLU:
              2·b·s·(4h² + 3hf) per layer instead of 24·b·s·h²); a step is 3F (backward = 2F)
    recompute full: + L layers' forward; sqrt: + the checkpointed layers'; selective: + the
              attention core, L·4·b·s²·h (Korthikanti et al. 2022)
    offload   ZeRO-Offload: gradients down and weights up over PCIe (w·n/N bytes each way,
              ``pcie`` B/s) and the host update (Adam reads an fp32 gradient, master, m and v and
              writes back the last three: 28·n/N bytes at ``host_bandwidth``), not overlapped
    pipeline  the bubble: (m + p - 1)/m of the time of m micro-batches
    seconds   3F / (``gpu_flops`` · ``utilization``) per micro-batch: fp32 (TF32) at half the
              rate of fp16/bf16, so plain fp32 training is the 1.0 and mixed precision 0.5

Data-parallel and ZeRO communication are assumed hidden behind compute (they are not modelled);
int8 storage of saved tensors is counted as free in time, and so is the choice of optimizer on the
device (8-bit Adam's and Adafactor's update is a small share of a large model's step).

The proposal is never a stack tinymem refuses to build: :func:`refusal` asks the probe planner's
rules (:func:`tinymem.planner.measured.recipe.supported`), so half precision with the optimizer on the
host is shown (its numbers are what ZeRO-Offload needs) but not proposed.
"""
import math
import numbers
from collections import namedtuple

from ..terms import analytic
from .. import conventions
from . import parallel
from ..model import architectures as archs
from ...checks import positive_int, real_number
from ...memory import parse_bytes
from ..inputs import Stack, resolve
from ..measured.recipe import Combination, supported

GPU_FLOPS = {"fp32": 156e12, "half": 312e12}  # A100 dense: TF32 and bf16/fp16 tensor cores
UTILIZATION = 0.5        # a good large-model run reaches about half of peak
PCIE = 25e9              # PCIe 4.0 x16, one direction, achieved
HOST_BANDWIDTH = 100e9   # host memory bandwidth the CPU optimizer streams through
HOST_STEP_BYTES = 28     # per parameter: Adam reads gradient, master, m, v and writes the last three

# The rows of :func:`stacks` that grow pipeline stages, not data-parallel ranks (on one GPU
# their Stack has one stage, like a data-parallel one).
PIPELINES = ("bf16 + full recompute, 1F1B pipeline", "... + int8 saved tensors")

Row = namedtuple("Row", "name stack breakdown fits fewest_gpus time refused")
Row.__new__.__defaults__ = (None,)
Row.__doc__ = """One stack on the machine asked about: its :class:`~.analytic.Breakdown` at the
GPU count given, whether its peak fits, the fewest GPUs with which it fits (None: no count
does), its step time relative to plain fp32 training, and why tinymem would refuse to build it
(None: it builds)."""


def stacks(gpus, micro_batches=None):
    """``[(name, Stack)]``: each the previous one plus one technique (the last rows branch from
    "+ full recompute": other optimizers and precisions, and the pipelines)."""
    base = Stack("fp32", "Adam", ranks=gpus)
    out = [("fp32 + Adam, data parallel", base)]
    for name, change in (("+ bf16 mixed precision", {"precision": "bf16"}),
                         ("+ selective recompute", {"recompute": "selective"}),
                         ("+ full recompute", {"recompute": "full"}),
                         ("+ ZeRO-1", {"zero": 1}), ("+ ZeRO-2", {"zero": 2}), ("+ ZeRO-3", {"zero": 3}),
                         ("+ ZeRO-Offload (gradients, optimizer on the host)", {"offload": "zero-offload"})):
        out.append((name, out[-1][1]._replace(**change)))
    full = out[3][1]
    out.append(("bf16 + full recompute, 8-bit Adam", full._replace(optimizer="Adam8bit")))
    out.append(("bf16 + full recompute, Adafactor", full._replace(optimizer="Adafactor")))
    out.append(("pure bf16 (no masters) + full recompute, 8-bit Adam",
                full._replace(precision="bf16-pure", optimizer="Adam8bit")))
    out.append((PIPELINES[0], grow(full._replace(ranks=1), gpus, True, micro_batches)))
    out.append((PIPELINES[1], out[-1][1]._replace(storage="int8")))
    if gpus % parallel.MAX_TENSOR == 0:
        t = parallel.MAX_TENSOR
        out.append((f"bf16 + selective, tensor x{t} + sequence parallel, ZeRO-1",
                    Stack("bf16", recompute="selective", zero=1, ranks=gpus // t, tensor=t, sequence_parallel=True)))
    return out


# Closed-form recomputation -> the probe planner's checkpoint schedule (``workloads.SCHEDULES``):
# full recomputation checkpoints every block. Selective recomputation has no schedule there.
CHECKPOINTS = {"none": "none", "full": "block", "sqrt": "sqrt"}


def refusal(stack):
    """Why tinymem would not build ``stack`` (None: it would), by the probe planner's rules
    (:func:`tinymem.planner.measured.recipe.supported`) with the stack's own recomputation; pure bf16 is
    judged as bf16, the half storage it shares. Tensor and sequence parallelism, and selective
    recomputation, are refused: the planner builds neither."""
    return refused(resolve(stack))


def refused(stack):
    """:func:`refusal` below the door (``stack`` resolved)."""
    if stack.tensor > 1 or stack.sequence_parallel:
        return "tensor and sequence parallelism: tinymem splits no layer's matrices across GPUs"
    if stack.recompute not in CHECKPOINTS:
        return (f"{stack.recompute} recomputation: tinymem's planner builds the checkpoint schedules "
                f"{', '.join(CHECKPOINTS.values())} only")
    precision = {"mixed": "fp16", "bf16-pure": "bf16"}.get(stack.precision, stack.precision)
    offload = "optimizer" if stack.offload else "none"
    return supported(Combination(CHECKPOINTS[stack.recompute], precision, stack.label, offload, 1))


def candidates(gpus, micro_batches=None):
    """Every combination the proposal is chosen from: fp32, bf16 or pure bf16; Adam, 8-bit Adam
    or Adafactor; recompute none, selective or full; ZeRO 0-3 over the GPUs; the optimizer on the
    device or ZeRO-Offload; and 1F1B pipelines over the GPUs (bf16, full recompute, plain or int8
    saved tensors). In order of preference: at equal time the first wins."""
    out = []
    for precision in ("fp32", "bf16", "bf16-pure"):
        for optimizer in ("Adam", "Adam8bit", "Adafactor"):
            for recompute in ("none", "selective", "full"):
                for zero in range(4):
                    for offload in (False, "zero-offload"):
                        out.append(Stack(precision, optimizer, recompute, zero=zero, ranks=gpus, offload=offload))
    if gpus > 1:
        pipe = grow(Stack("bf16", "Adam", "full"), gpus, True, micro_batches)
        out += [pipe, pipe._replace(storage="int8")]
    return out


def layouts_3d(arch, gpus, micro_batches=None):
    """Megatron's 3D layouts over ``gpus`` (:func:`.parallel.layouts`, pure data parallel left
    out): bf16, ZeRO-1 over the data-parallel copies, selective or full recompute, sequence
    parallelism with tensor parallelism, 4·p micro-batches on a pipeline."""
    out = []
    for t, p, d in parallel.layouts(arch, gpus):
        if t == p == 1:
            continue
        for recompute in ("selective", "full"):
            out.append(Stack("bf16", "Adam", recompute, zero=1, ranks=d, pipeline=p, tensor=t, sequence_parallel=t > 1,
                             micro_batches=(micro_batches or 4 * p) if p > 1 else 1))
    return out


def describe(stack):
    """A short name: ``bf16, selective recompute, ZeRO-2, optimizer on the host``."""
    parts = ["pure bf16 (no masters)" if stack.precision == "bf16-pure" else stack.precision]
    if stack.optimizer != "Adam":
        parts.append({"Adam8bit": "8-bit Adam"}.get(stack.optimizer, stack.optimizer))
    if stack.recompute != "none":
        parts.append(f"{stack.recompute} recompute")
    if stack.storage == "int8":
        parts.append("int8 saved tensors")
    if stack.zero:
        parts.append(f"ZeRO-{stack.zero}")
    if stack.offload:
        parts.append({"zero-offload": "ZeRO-Offload", "zero-offload-params": "ZeRO-Offload + parameters on the host"}
                     .get(stack.offload, "optimizer on the host"))  # True and "optimizer": tinymem's
    if stack.tensor > 1:
        parts.append(f"tensor x{stack.tensor}" + (" + sequence parallel" if stack.sequence_parallel else ""))
    if stack.pipeline > 1:
        parts.append(f"{stack.schedule.upper()} pipeline x{stack.pipeline}")
    if stack.tensor > 1 or stack.pipeline > 1:
        parts.append(f"data x{stack.ranks}")
    return ", ".join(parts)


def forward_flops(arch, batch):
    """Flops of one forward over ``batch`` sequences (matmuls only, 2 per multiply-add)."""
    b, s, h, f = batch, arch.seq, arch.hidden, archs.ffn(arch)
    matrices = 24 * b * s * h * h if arch.mlp == "gelu" else 2 * b * s * (4 * h * h + 3 * h * f)
    return arch.layers * (matrices + 4 * b * s * s * h) + 2 * b * s * h * arch.vocab


def relative_time(arch, batch, stack, gpu_flops=GPU_FLOPS, utilization=UTILIZATION, pcie=PCIE,
                  host_bandwidth=HOST_BANDWIDTH):
    """Step time of ``stack`` over the step time of plain training, micro-batches of ``batch``
    sequences (see the module docstring)."""
    arch = archs.get_arch(arch)  # a name raised AttributeError; batch 0 divided by zero, -1 gave 1.0
    return step_time(arch, batch, resolve(stack, arch, batch), gpu_flops, utilization, pcie, host_bandwidth)


def step_time(arch, batch, stack, gpu_flops=GPU_FLOPS, utilization=UTILIZATION, pcie=PCIE,
              host_bandwidth=HOST_BANDWIDTH):
    """:func:`relative_time` below the door (``stack`` resolved)."""
    forward = forward_flops(arch, batch)
    head = 2 * batch * arch.seq * arch.hidden * arch.vocab
    per_layer = (forward - head) / arch.layers
    kept, size, last = analytic.segments(arch.layers, stack.recompute)
    extra = kept * size * per_layer
    if stack.recompute == "selective":
        extra = arch.layers * 4 * batch * arch.seq ** 2 * arch.hidden
    compute = 3 * forward + extra
    rate = gpu_flops["fp32" if stack.width.compute == 4 else "half"] * utilization
    seconds = compute / rate * stack.micro_batches
    if stack.pipeline > 1:  # each rank runs 1/p of the layers, with a bubble of p - 1 slots
        seconds = seconds / stack.pipeline * (stack.micro_batches + stack.pipeline - 1) / stack.micro_batches
    if stack.offload:
        n = archs.parameter_count(arch) / (stack.ranks if stack.zero else 1) / stack.pipeline
        seconds += 2 * stack.width.weight * n / pcie + HOST_STEP_BYTES * n / host_bandwidth
    plain = 3 * forward / (gpu_flops["fp32"] * utilization) * stack.micro_batches / stack.pipeline
    return seconds / plain


def run(arch, batch, stack, mode="tinymem", convention="tinymem"):
    """:func:`analytic.breakdown` with micro-batches of ``batch`` sequences (``stack.micro_batches``
    of them per step), its model states counted by ``convention`` (:mod:`.conventions`)."""
    arch = archs.get_arch(arch)
    positive_int("batch", batch)  # as given: 0.5 sequences in 2 micro-batches was refused as "got 1.0"
    return evaluate(arch, batch, resolve(stack, arch, batch * stack.micro_batches), mode, convention)


def evaluate(arch, batch, stack, mode="tinymem", convention="tinymem"):
    """:func:`run` below the door (``arch`` an Arch, ``stack`` resolved on it)."""
    return conventions.applied(analytic.evaluate(arch, batch * stack.micro_batches, stack, mode), stack, convention)


def grow(stack, count, stages, micro_batches=None):
    """``stack`` with ``count`` pipeline stages fed ``micro_batches`` micro-batches (default 4 per
    stage) when ``stages``, else ``count`` data-parallel copies: ``count`` is stages or copies,
    not GPUs (it takes ``count`` x :func:`gpus_per_count` GPUs). The one rule behind a row's
    "fits" and its "fewest GPUs"."""
    if stages:
        return stack._replace(pipeline=count, micro_batches=micro_batches or 4 * count)
    return stack._replace(ranks=count)


def gpus_per_count(stack, stages):
    """GPUs that one more of :func:`grow`'s ``count`` adds to ``stack``: a pipeline stage spans
    t·d GPUs (each of the d copies gets one more stage of t ranks), a data-parallel copy t·p."""
    return stack.tensor * (stack.ranks if stages else stack.pipeline)


def fewest_gpus(arch, batch, stack, gpu_memory, mode="tinymem", limit=1 << 20, stages=None, convention="tinymem",
                micro_batches=None):
    """The fewest GPUs with which ``stack``'s peak fits ``gpu_memory``, counted in GPUs
    (stages or copies times :func:`gpus_per_count`; None when no count up to ``limit`` copies or
    stages does). Data-parallel stacks grow their ranks (a copy is t·p GPUs with tensor or
    pipeline parallelism): the peak never rises with N (each sharded term is bytes/N), so a
    bisection finds the least. Pipeline stacks grow their stages (``stages``: grow the stages;
    default, when ``stack`` has more than one), each count fed ``micro_batches`` (default 4 per
    stage, :func:`grow`): a stage holds ceil(L/p) layers, not monotone in p, so every count
    from 1 to the layers is tried; p stages of t ranks in d copies are t·p·d GPUs."""
    arch = archs.get_arch(arch)
    positive_int("batch", batch)
    # Below the door the search grows ranks or stages up to ``limit`` unchecked: 2.5 looped forever,
    # 0 divided by zero, -5 and a NaN memory answered None; micro_batches -1 blamed "the batch (-1)".
    positive_int("limit", limit)
    gpu_memory = memory_of(gpu_memory)
    if micro_batches is not None:
        positive_int("micro_batches", micro_batches)
    return fewest(arch, batch, resolve(stack, arch, batch * stack.micro_batches), gpu_memory, mode, limit, stages,
                  convention, micro_batches)


def fewest(arch, batch, stack, gpu_memory, mode="tinymem", limit=1 << 20, stages=None, convention="tinymem",
           micro_batches=None):
    """:func:`fewest_gpus` below the door (``arch`` an Arch, ``stack`` resolved on it: growing
    its ranks or stages changes no name the door resolved). Returns GPUs, as it does."""
    stages = stack.pipeline > 1 if stages is None else stages
    scale = gpus_per_count(stack, stages)  # the search counts stages or copies; it returns GPUs

    def fits(count):
        return evaluate(arch, batch, grow(stack, count, stages, micro_batches), mode, convention).peak <= gpu_memory

    if stages:
        least = next((count for count in range(1, min(limit, arch.layers) + 1) if fits(count)), None)
        return None if least is None else least * scale
    if fits(1):
        return scale
    if not fits(limit):
        return None
    low, high = 1, limit  # fits(high), not fits(low)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if fits(mid) else (mid, high)
    return high * scale


def plan_arch(arch, gpus, gpu_memory, batch=1, mode="tinymem", micro_batches=None, convention="tinymem"):
    """The stacks of :func:`stacks` for ``arch`` on ``gpus`` GPUs of ``gpu_memory`` bytes, and
    the proposal: of all :func:`candidates`, the fitting one with the smallest time (or None).
    Returns ``(rows, proposal)``, both :class:`Row` (the proposal's fewest GPUs is ``gpus``)."""
    arch = archs.get_arch(arch)
    # "8" and None raised TypeError; checked here, not by checks.is_int: the GPU count stays in this room
    if not isinstance(gpus, numbers.Integral) or isinstance(gpus, bool) or gpus < 1:
        raise ValueError(f"--gpus must be a whole number >= 1, got {gpus!r}")
    positive_int("batch", batch)
    gpu_memory = memory_of(gpu_memory)
    if micro_batches is not None:  # 0 was read as "not given" (4 per stage)
        positive_int("micro_batches", micro_batches)
    rows = []
    for name, stack in stacks(gpus, micro_batches):
        if stack.pipeline > arch.layers or not parallel.splits(arch, stack.tensor):
            continue
        r = resolve(stack, arch, batch * stack.micro_batches)  # the door: once per stack weighed
        result = evaluate(arch, batch, r, mode, convention)
        rows.append(Row(name, stack, result, result.peak <= gpu_memory,
                        fewest(arch, batch, r, gpu_memory, mode, max(1 << 20, gpus), name in PIPELINES,
                               convention, micro_batches),  # the search reaches the GPUs given
                        step_time(arch, batch, r), refused(r)))
    best = None
    for stack in candidates(gpus, micro_batches) + layouts_3d(arch, gpus, micro_batches):
        if stack.pipeline > arch.layers:
            continue
        r = resolve(stack, arch, batch * stack.micro_batches)
        if refused(r):
            continue
        result = evaluate(arch, batch, r, mode, convention)
        if result.peak <= gpu_memory:
            row = Row(describe(stack), stack, result, True, gpus, step_time(arch, batch, r))
            if best is None or row.time < best.time:
                best = row
    return rows, best


def memory_of(gpu_memory):
    """``gpu_memory`` in bytes, > 0 (a number, or a size such as ``"80GB"``): NaN fitted nothing
    and -1 said nothing fits, silently."""
    try:
        value = parse_bytes(gpu_memory) if isinstance(gpu_memory, str) else real_number("gpu_memory", gpu_memory)
    except (TypeError, ValueError):
        value = None
    if value is None or not 0 < value < math.inf:
        raise ValueError(f"gpu_memory is the bytes of one GPU, a number > 0 or a size such as '80GB', "
                         f"got {gpu_memory!r}")
    return value


def needs_gpus(row):
    """Whether ``row``'s technique only differs from the stack above it on more than one GPU (a
    ZeRO stage on the device, a pipeline, tensor parallelism)."""
    return (row.stack.zero and not row.stack.offload) or row.name in PIPELINES or row.stack.tensor > 1


def table(rows, gpus, gpu_memory, label=None):
    """Rows for ``cli.print_table``: bytes per bucket (GB = 10⁹ B), peak, fits, fewest GPUs, time.
    ``label``: the memory as the user wrote it (default: GB, rounded)."""
    def gb(x):
        return f"{x / 1e9:.1f}"
    label = label or f"{gpu_memory / 1e9:.0f}GB"
    out = []
    for r in rows:
        b = r.breakdown.buckets
        out.append({"stack": r.name, "param": gb(b["parameter"]), "grad": gb(b["gradient"]),
                    "optim": gb(b["optimizer"]), "activ": gb(b["activation"]), "work": gb(b["workspace"]),
                    "host": gb(r.breakdown.host), "peak GB": gb(r.breakdown.peak),
                    f"fits {gpus}x{label}": "yes" if r.fits else "no",
                    "fewest GPUs": "-" if r.fewest_gpus is None else r.fewest_gpus,
                    "time x": f"{r.time:.2f}", "tinymem builds it": "no" if r.refused else "yes"})
    return out


def summary(arch, rows, proposal, gpus, gpu_memory, label=None, full_training=False):
    """A few lines: the model, then the proposal or the fewest GPUs that would do. ``label``:
    the memory as the user wrote it; ``full_training``: say "training" stacks (fine-tuning is
    summed up apart)."""
    arch = archs.get_arch(arch)
    label = label or f"{gpu_memory / 1e9:.0f} GB"
    what = "full-training stack" if full_training else "stack"
    lines = [archs.describe(arch)]
    if proposal is not None:
        lines.append(f"smallest {what} that fits {gpus} x {label}: {proposal.name} "
                     f"(peak {proposal.breakdown.peak / 1e9:.1f} GB per GPU, time x{proposal.time:.2f})")
    else:
        able = [r for r in rows if r.fewest_gpus is not None and not r.refused]
        lines.append(f"no {what} fits {gpus} x {label}")
        if able:
            best = min(able, key=lambda r: (r.fewest_gpus, r.time))
            lines.append(f"fewest GPUs: {best.fewest_gpus} with {best.name} (time x{best.time:.2f})")
    return "\n".join(lines)
