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

``deepspeed``: DeepSpeed's estimators as of v0.19.6 (deepspeedai/DeepSpeed commit
edaa7221267243c7be7fb49c5d5f5c4fb97b4641, August 2026; :data:`DEEPSPEED`): on the GPU,
``estimate_zero2_model_states_mem_needs`` (``runtime/zero/stage_1_and_2.py``) keeps the half
weights whole and shards the rest, 2·n + 18·n/N (2 half gradients + 4 fp32 gradients + 4 fp32
masters + 8 Adam; since PR #5099, 2024: it was 4·n + 16·n/N, half gradients whole, which this
convention counts for stage 1, where they are); ``estimate_zero3_model_states_mem_needs``
(``stage3.py``) shards all but the half gradients, which it reduces into the fp32 shard as they
come (18·n/N), plus the largest module's half weights and gradients in full (4·n_big). With CPU
offload the GPU keeps only the half weights (stage 2: 2·n; stage 3: 2·n/N + 4·n_big; with
``offload_param`` too: 4·n_big). Pure bf16 has no fp32 masters or gradients in this count
either (DeepSpeed itself always steps an fp32 partition). The host rows are what lives there
during the step; :func:`deepspeed_estimate` gives both of DeepSpeed's numbers as it prints them,
its CPU one with ``additional_buffer_factor`` and the model loading it allows for.

``zero-paper`` (Rajbhandari et al. 2020, Figure 1): 2 + 2 + K with K = 12 (masters and Adam's
state), no fp32 gradients, no transients; 7.5B parameters on 64 GPUs: 120, 31.4, 16.6, 1.9 GB.
"""
import math
from collections import namedtuple

from ..checks import is_int, real_number, true_or_false
from .inputs import resolve
from .model import architectures as archs
from .terms.analytic import stage_parameters
from .terms.sharding import divide, parameter_total, state_bytes

CONVENTIONS = ("tinymem", "deepspeed", "zero-paper")
DEEPSPEED = "DeepSpeed v0.19.6 (commit edaa722)"  # the estimators the deepspeed convention reproduces

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
    if parameters is not None:  # (-5, shapes) gave negative bytes; (n,) raised "not enough values to unpack"
        if not isinstance(parameters, tuple) or len(parameters) != 2:
            raise ValueError(f"parameters is (count, shapes: a count, shapes or {{shape: how many}}) of what one GPU's group holds, "
                             f"got {parameters!r}")
        parameter_total(parameters[0]), parameter_total(parameters[1])  # each refuses what is not whole, >= 0
    return resolved_rows(arch, resolve(stack, arch), convention, parameters or (archs.parameter_count(arch),
                                                                          archs.shape_counts(arch)))


def resolved_rows(arch, stack, convention, parameters):
    """:func:`rows` below the door: ``arch`` an Arch, ``stack`` resolved, ``parameters`` given."""
    n, shapes = parameters
    wd, kind, zero, N, label = stack.width, stack.kind, stack.zero, stack.ranks, stack.label
    w = wd.weight
    state = state_bytes(label, shapes, wd.state) / n if n else 0
    n_layer = archs.layer_parameter_count(arch) / stack.tensor
    host = "host" if kind else "device"
    if convention == "zero-paper":
        out = [Row("weights", "parameter", w, N if zero >= 3 else 1, n, "device"),
               Row("gradients", "gradient", w, N if zero >= 2 else 1, n, "host" if kind else "device"),
               # K = 12 is mixed precision's: 4 of fp32 masters + Adam's 8; fp32 and pure bf16 keep no masters
               Row(f"K: fp32 masters + {label} state" if wd.master else f"K: {label} state (no fp32 masters)",
                   "optimizer", wd.master + state, N if zero >= 1 else 1, n, host)]
        return out
    if convention == "deepspeed":
        shard = N if zero >= 1 else 1
        pure = wd.master == 0 and wd.weight < 4  # bf16-pure: DeepSpeed's fp32 partition is not there
        masters = 0 if pure else wd.master or 4  # DeepSpeed's optimizer always steps an fp32 partition
        out = [Row("weights", "parameter", w, N if zero >= 3 else 1, n,
                   "host" if kind == "zero-offload-params" else "device")]
        if zero < 3 and not kind:  # stage 3 and offload reduce them into the fp32 shard as they come
            name = "half gradients, sharded" if zero == 2 else "half gradients, whole"
            out.append(Row(name, "gradient", w, N if zero == 2 else 1, n, "device"))
        if masters:
            out.append(Row("fp32 masters", "optimizer", masters, shard, n, host))
        out.append(Row(f"{label} state", "optimizer", state, shard, n, host))
        if not pure:
            out.append(Row("fp32 gradients", "gradient", 4, shard, n, host))
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


def deepspeed_estimate(stage, total_params, largest_layer_params=0, num_gpus_per_node=1, num_nodes=1,
                       cpu_offload=False, cpu_offload_params=False, zero_init=True, additional_buffer_factor=1.5):
    """``(cpu bytes per node, gpu bytes per GPU)`` as DeepSpeed's ``estimate_zero2_model_states_
    mem_needs`` (``stage`` 2) or ``estimate_zero3_model_states_mem_needs`` (3) return them, every
    branch, as of :data:`DEEPSPEED`. Its CPU number is a node's: the offloaded states times
    ``additional_buffer_factor``, or the fp32 model each process loads (4 bytes a parameter a
    GPU) when that is larger; without offload, that loading alone."""
    for name, value, least in (("total_params", total_params, 0), ("largest_layer_params", largest_layer_params, 0),
                               ("num_gpus_per_node", num_gpus_per_node, 1), ("num_nodes", num_nodes, 1)):
        if not is_int(value) or value < least:  # 0 GPUs divided by zero, -5 parameters gave -21 bytes
            raise ValueError(f"{name} must be a whole number >= {least}, got {value!r}")
    if not (is_int(stage) and stage in (2, 3)):
        raise ValueError(f"DeepSpeed estimates ZeRO stage 2 or 3, got {stage!r}")
    flags = (("cpu_offload", cpu_offload), ("cpu_offload_params", cpu_offload_params), ("zero_init", zero_init))
    for name, flag in flags:
        true_or_false(name, flag)  # 2 or "no" would pick a branch by truth, silently
    # inf raised OverflowError in int()
    if not 0 < real_number("additional_buffer_factor", additional_buffer_factor) < math.inf:
        raise ValueError("additional_buffer_factor is DeepSpeed's allowance, a finite number > 0, got "
                         f"{additional_buffer_factor!r}")
    # Python ints: a NumPy int64 count would wrap past 9.2e18 bytes without a word.
    counts = (int(total_params), int(largest_layer_params), int(num_gpus_per_node), int(num_nodes))
    try:
        return _deepspeed_bytes(int(stage), *counts, bool(cpu_offload), bool(cpu_offload_params), bool(zero_init),
                                float(additional_buffer_factor))
    except OverflowError:  # a float past 1.8e308 (int() of inf), or a count too large for a float
        raise ValueError(f"deepspeed_estimate: total_params={total_params}, largest_layer_params="
                         f"{largest_layer_params} and additional_buffer_factor={additional_buffer_factor!r} give "
                         "more bytes than a float holds (1.8e308); check the parameter counts and the factor") from None


def _deepspeed_bytes(stage, total_params, largest_layer_params, num_gpus_per_node, num_nodes, cpu_offload,
                     cpu_offload_params, zero_init, additional_buffer_factor):
    """DeepSpeed's arithmetic, on checked arguments."""
    gpus = num_nodes * num_gpus_per_node
    n, factor = total_params, additional_buffer_factor
    if stage == 2:
        if cpu_offload:
            return int(n * max(4 * gpus, 16) * factor), int(2 * n)
        return int(n * 4 * num_gpus_per_node * factor), int(2 * n + int(18 * n / gpus))
    largest = 4 * largest_layer_params
    if cpu_offload:
        # in DeepSpeed's order, n * states * (1 / nodes): n * (states / nodes) rounds otherwise,
        # and int() then gains or drops a byte
        states, per_node = (18 if cpu_offload_params else 16), 1 / num_nodes
        gpu = largest if cpu_offload_params else largest + int(2 * n / gpus)
        cpu = (n * states * per_node if zero_init else n * max(4 * num_gpus_per_node, states * per_node)) * factor
        return int(cpu), int(gpu)
    cpu = (largest_layer_params if zero_init else n) * 4 * num_gpus_per_node * factor
    return int(cpu), int(largest + int(18 * n / gpus))


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
    return applied(result, resolve(result.stack), convention)


def applied(result, stack, convention):
    """:func:`apply` below the door: ``stack``, ``result``'s, resolved."""
    if convention == "tinymem":
        return result
    if convention not in CONVENTIONS:
        raise ValueError(f"unknown convention {convention!r}; choose one of {', '.join(CONVENTIONS)}")
    table = resolved_rows(result.arch, stack, convention, stage_parameters(result.arch, stack.pipeline, stack.tensor))
    states = totals(table)
    buckets = dict(result.buckets, **{b: states[b] for b in ("parameter", "gradient", "optimizer")})
    moment = f"{convention} model states + the activation and workspace peaks"
    return result._replace(buckets=buckets, peak=sum(buckets.values()), moment=moment,
                           moments={moment: buckets}, host=states["host"])
