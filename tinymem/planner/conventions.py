"""Three ways to count the same model states, term by term, in bytes per parameter.

The planner's numbers differ from DeepSpeed's estimators and from the ZeRO paper's table by up
to a third, and none of the three is wrong: each counts a different set of terms. Here each is
written as rows (term, bytes per parameter, divided by how many ranks, where it lives), so that
``tinymem plan --explain`` shows which terms make the difference. n: parameters (of one pipeline
stage, over t tensor-parallel ranks), N: data-parallel ranks, w: half or fp32 weight bytes, S:
the optimizer's state per parameter (Adam: 8), n_big: the largest module's parameters.

``tinymem`` (what a real tinymem step holds, and what its ledger measures): weights w, gradients
w, fp32 masters 4, state S, and during the step fp32 master gradients 4 (tinymem's
``MasterOptimizer``); ZeRO divides them as its stage says (master gradients from stage 1: a rank
upcasts its own shard). Transients: a ZeRO-3 rank gathers one layer (w·n_layer); a ZeRO-2/3
rank holds one layer's full gradient and its flat copy while reducing it (2·w·n_layer).

``deepspeed`` (``estimate_zero2_model_states_mem_needs`` in DeepSpeed's
``runtime/zero/stage_1_and_2.py``, ``estimate_zero3_model_states_mem_needs`` in ``stage3.py``):
stages 0-2 keep half weights and half gradients whole (2 + 2) and shard fp32 masters, Adam's
state and fp32 gradients (4 + 8 + 4 = 16/N); stage 3 shards all but the half gradients, which it
reduces into the fp32 shard as they come (2 + 4 + 8 + 4 = 18/N), plus the largest module's half
weights and gradients in full (4·n_big). With CPU offload the GPU keeps only the half weights
(stage 2: 2·n; stage 3: 2·n/N + 4·n_big; with ``offload_param`` too: 4·n_big).

``zero-paper`` (Rajbhandari et al. 2020, Figure 1): 2 + 2 + K with K = 12 (masters and Adam's
state), no fp32 gradients, no transients; 7.5B parameters on 64 GPUs: 120, 31.4, 16.6, 1.9 GB.
"""
from collections import namedtuple

from . import architectures as archs
from .analytic import stage_parameters
from .precision import width
from .sharding import divide, offload_kind, optimizer_bytes, optimizer_label

CONVENTIONS = ("tinymem", "deepspeed", "zero-paper")

Row = namedtuple("Row", "term bucket per_parameter divisor count place")
Row.__doc__ = """One term: its name, the ledger bucket it falls in, bytes per parameter, the ranks
it is divided by, how many parameters it covers (n, or n_layer, n_big for a transient), and
"device" or "host"."""


def rows(arch, stack, convention="tinymem", parameters=None):
    """The model-state terms of ``stack`` on ``arch`` under ``convention``: a list of :class:`Row`.

    ``parameters``: ``(count, shapes)`` of what one GPU's data-parallel group holds (default:
    the whole model; a pipeline stage or a tensor-parallel shard otherwise)."""
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; choose one of {', '.join(CONVENTIONS)}")
    arch = archs.get_arch(arch)
    n, shapes = parameters or (archs.parameter_count(arch), archs.shape_counts(arch))
    wd, kind, zero, N = width(stack.precision), offload_kind(stack.offload), stack.zero, stack.ranks
    w = wd.weight
    state = optimizer_bytes(stack.optimizer, shapes, wd.state) / n if n else 0
    label = optimizer_label(stack.optimizer)
    n_layer = archs.layer_parameter_count(arch) / stack.tensor
    host = "host" if kind else "device"
    if convention == "zero-paper":
        out = [Row("weights", "parameter", w, N if zero >= 3 else 1, n, "device"),
               Row("gradients", "gradient", w, N if zero >= 2 else 1, n, "host" if kind else "device"),
               Row(f"K: fp32 masters + {label} state", "optimizer", 4 + state, N if zero >= 1 else 1, n, host)]
        return out
    if convention == "deepspeed":
        shard = N if zero >= 1 else 1
        masters = wd.master or 4  # DeepSpeed's optimizer always steps an fp32 partition
        out = [Row("weights", "parameter", w, N if zero >= 3 else 1, n,
                   "host" if kind == "zero-offload-params" else "device")]
        if zero < 3 and not kind:  # stage 3 and offload reduce them into the fp32 shard as they come
            out.append(Row("half gradients, whole", "gradient", w, 1, n, "device"))
        out += [Row("fp32 masters", "optimizer", masters, shard, n, host),
               Row(f"{label} state", "optimizer", state, shard, n, host),
               Row("fp32 gradients", "gradient", 4, shard, n, host)]
        if zero >= 3:
            big = archs.largest_module(arch) / stack.tensor
            out += [Row("largest module's weights, gathered", "parameter", w, 1, big, "device"),
                    Row("largest module's gradients", "gradient", w, 1, big, "device")]
        return out
    masters = wd.master or (4 if kind else 0)  # offload keeps an fp32 master of fp32 weights too
    out = [Row("weights", "parameter", w, N if zero >= 3 else 1, n,
               "host" if kind == "zero-offload-params" else "device"),
           Row("gradients", "gradient", w, N if zero >= 2 else 1, n,
               "device" if kind in (None, "optimizer") else "streamed to the host"),
           Row("fp32 masters", "optimizer", masters, N if zero >= 1 else 1, n, host),
           Row(f"{label} state", "optimizer", state, N if zero >= 1 else 1, n, host)]
    if kind in ("zero-offload", "zero-offload-params"):
        out.append(Row("fp32 gradients", "gradient", 4, N if zero >= 1 else 1, n, "host"))
    elif wd.master_gradient and kind is None:
        out.append(Row("fp32 master gradients (during the step)", "gradient", wd.master_gradient,
                       N if zero >= 1 else 1, n, "device"))
    if zero >= 3:
        out.append(Row("one layer gathered", "parameter", w, 1, n_layer, "device"))
    if kind in ("zero-offload", "zero-offload-params"):
        out.append(Row("one layer's gradients streamed", "gradient", w, 1, n_layer, "device"))
    elif zero >= 2:
        out.append(Row("one layer's gradients and their flat copy, reduced", "gradient", 2 * w, 1, n_layer, "device"))
    return out


def row_bytes(row):
    return divide(row.per_parameter * row.count, row.divisor)


def totals(table):
    """``{"parameter", "gradient", "optimizer", "host"}`` bytes per GPU of a list of rows (rows
    streamed to the host hold nothing at rest)."""
    out = dict.fromkeys(("parameter", "gradient", "optimizer", "host"), 0)
    for row in table:
        if row.place == "device":
            out[row.bucket] += row_bytes(row)
        elif row.place == "host":
            out["host"] += row_bytes(row)
    return out


def device_bytes(table):
    """The model states on one GPU: the sum of the device rows."""
    return sum(row_bytes(r) for r in table if r.place == "device")


def apply(result, convention):
    """``result`` (a :class:`~.analytic.Breakdown`) with its model states counted by
    ``convention``: the parameter, gradient and optimizer buckets from :func:`rows`, the
    activation and workspace buckets' own peaks kept, the peak their sum (DeepSpeed and the
    paper count no moments), the host total from the rows. tinymem's convention is the
    breakdown itself."""
    if convention == "tinymem":
        return result
    stack = result.stack
    table = rows(result.arch, stack, convention, stage_parameters(result.arch, stack.pipeline, stack.tensor))
    states = totals(table)
    buckets = dict(result.buckets, **{b: states[b] for b in ("parameter", "gradient", "optimizer")})
    moment = f"{convention} model states + the activation and workspace peaks"
    return result._replace(buckets=buckets, peak=sum(buckets.values()), moment=moment,
                           moments={moment: buckets}, host=states["host"])
