"""The closed-form memory of one training step of a decoder-only Transformer, bucket by bucket.

Each term is written once, here or in :mod:`.activations` (saved tensors, layer by layer).
With n parameters (the largest one n_max), N ranks, w = 4 bytes in fp32 and 2 in fp16/bf16:

    parameter   w·n                          ZeRO-3: w·n/N (+ one gathered layer during its use)
    gradient    w·n                          ZeRO-2/3: w·n/N (+ one layer in flight)
                (k > 1 micro-batches add into it in place: no second copy)
                + 4·n of fp32 master gradients during the step of a half model (tinymem's
                  ``MasterOptimizer``; mode "korthikanti" follows the ZeRO paper's 2 bytes)
    optimizer   the optimizer's state by its own formula (``optim.table``: Adam 8·n, SGD
                momentum 4·n, Adam8bit ~2·n, Adafactor 4·(rows + columns) per matrix)
                + 4·n of fp32 masters with fp16/bf16;  ZeRO-1/2/3: /N;  offloaded: 0 (host)
    activation  the saved tensors of the micro-batch in flight (:mod:`.activations`), times the
                layers that keep them: all L (none, selective); with checkpoint segments,
                the kept segment inputs plus the un-checkpointed last segment, or plus one
                recomputed segment in backward, whichever is larger; times the micro-batches in
                flight on a pipeline stage (GPipe: all m; 1F1B: min(p, m) on the first stage)
    workspace   what lives beside them at the peak: the fp32 logits 4·N·V when the loss is
                computed; the optimizer's temporaries, c values of the largest parameter (SGD
                1, Adam and most others 2, Adam8bit 5) and the token ids and targets 16·B·s

The step peaks at one of three moments, each the sum of its buckets: the end of a forward
(the loss), the recomputation of the last checkpointed segment, or the optimizer step. A
bucket's own peak is its largest value over the step. :func:`breakdown` returns both.

Scope: tinymem's ledger counts arrays the framework registers; an op's internal temporaries
(the softmax backward's dP, GELU's tanh) are the allocator's, not the ledger's, and are left
out here as well (``tests/planner/test_analytic_exact.py`` states the bound on what remains).
"""
import math
from collections import namedtuple

from ..checks import positive_int

from . import architectures as archs
from .activations import Term, activations_per_layer, korthikanti_formula, layer_terms
from .moments import (activation_moments, attention_backward, layer_transient, micro_batch_sizes, segments,
                      total, transient_bound)
from .sharding import (PRECISIONS, SCRATCH, divide, is_half, model_states, parameter_total, optimizer_bytes, optimizer_label,
                       pipeline_in_flight, scratch_bytes)

__all__ = ["Stack", "Breakdown", "breakdown", "model_states", "PRECISIONS", "activations_per_layer", "korthikanti_formula",
           "layer_terms", "optimizer_bytes", "optimizer_label", "pipeline_in_flight", "micro_batch_sizes",
           "segments", "transient_bound", "attention_backward", "layer_transient", "activation_moments",
           "scratch_bytes", "SCRATCH"]

Stack = namedtuple("Stack", "precision optimizer recompute attention storage zero ranks pipeline "
                            "schedule micro_batches offload")
Stack.__new__.__defaults__ = ("fp32", "Adam", "none", "plain", None, 0, 1, 1, "1f1b", 1, False)
Stack.__doc__ = """One way to train: ``precision`` fp32 | fp16 | bf16 (half weights, gradients and
saved tensors, fp32 masters); ``optimizer`` a label of ``optim.table.CONFIGS``; ``recompute``
none | selective | full | sqrt; ``attention`` plain | chunked; ``storage`` of saved tensors (None:
the precision's; int8); ``zero`` stage 0-3 over ``ranks`` data-parallel ranks; ``pipeline``
stages with ``schedule`` gpipe | 1f1b; ``micro_batches`` per step (accumulated, or fed to the
pipeline); ``offload`` the optimizer state (and masters) to the host."""

Breakdown = namedtuple("Breakdown", "arch batch stack mode buckets peak moment moments host terms")
Breakdown.__doc__ = """``buckets``: each bucket's peak per device (bytes); ``peak``: the largest
moment's total; ``moment``: its name; ``moments``: ``{name: {bucket: bytes}}``; ``host``: bytes
on the host (offloaded state and masters); ``terms``: ``[(bucket, Term)]`` behind the numbers."""

BUCKETS = ("parameter", "gradient", "optimizer", "activation", "workspace")
SCHEDULES = ("none", "selective", "full", "sqrt")

def _check_stack(stack):
    if not isinstance(stack, Stack):
        raise TypeError(f"stack must be a planner.analytic.Stack (e.g. Stack(precision='bf16', zero=2)), "
                        f"got a {type(stack).__name__}")
    is_half(stack.precision)
    optimizer_label(stack.optimizer)
    if stack.recompute not in SCHEDULES:
        raise ValueError(f"unknown recompute {stack.recompute!r}; choose one of {', '.join(SCHEDULES)}")
    if stack.schedule not in ("gpipe", "1f1b"):
        raise ValueError(f"unknown pipeline schedule {stack.schedule!r}; choose gpipe or 1f1b")
    for field in ("pipeline", "ranks", "micro_batches"):  # 2.5 ranks gave a number
        positive_int(f"Stack.{field}", getattr(stack, field))


def breakdown(arch, batch=1, stack=Stack(), mode="tinymem", backend="gpu"):
    """The step's memory per device for ``arch`` trained with ``stack`` on ``batch`` sequences
    per data-parallel rank (split into ``stack.micro_batches``); a :class:`Breakdown`.

    ``mode``: "tinymem" counts what tinymem's Transformer saves and tinymem's mixed precision
    (fp32 master gradients during the step); "korthikanti" counts activations as Korthikanti
    et al. and model states as the ZeRO paper. ``backend``: "gpu" computes in the precision's
    dtype; "numpy" (tinymem on the CPU) computes in fp32, so checkpointed inputs are 4 bytes a
    value and a half layer upcasts its weights while it runs.
    """
    arch = archs.get_arch(arch)
    _check_stack(stack)
    positive_int("batch", batch)
    if stack.pipeline > arch.layers:
        raise ValueError(f"{stack.pipeline} pipeline stages for {arch.layers} layers: each stage needs at least one")
    half = is_half(stack.precision)
    w = 2 if half else 4
    shapes = [s for _, s in archs.parameter_shapes(arch)]
    n = parameter_total(shapes)
    n_layer = archs.layer_parameter_count(arch)
    p, ranks, zero = stack.pipeline, stack.ranks, stack.zero
    stage_layers = math.ceil(arch.layers / p)
    if p > 1:  # the busier end stage: token and position tables on the first, final norm and
        # head on the last (a tied head needs the token table there too, as Megatron copies it)
        first = _embedding_count(arch)
        last = n - arch.layers * n_layer - first + (arch.vocab * arch.hidden if arch.tied else 0)
        n_stage = stage_layers * n_layer + max(first, last)
        stage_shapes = [(n_stage,)]
    else:
        n_stage, stage_shapes = n, shapes
    states = model_states(stage_shapes, zero, ranks, stack.optimizer, "mixed" if half else "fp32", stack.offload)
    P, G, O = states["parameter"], states["gradient"], states["optimizer"]
    terms = [("parameter", Term("weights", f"{w}·n", P)), ("gradient", Term("gradients", f"{w}·n", G)),
             ("optimizer", Term(f"{optimizer_label(stack.optimizer)} state" + (" + fp32 masters" if half else ""),
                                "optim.table" + (" + 4·n" if half else ""), O))]
    if zero >= 3:  # one layer gathered in full while it computes
        P += w * n_layer
        terms.append(("parameter", Term("one gathered layer", f"{w}·n_layer", w * n_layer)))
    masters = divide(4 * n_stage, ranks if zero >= 2 else 1) if half and mode == "tinymem" else 0
    if masters:
        terms.append(("gradient", Term("fp32 master gradients (step)", "4·n", masters)))
    moments = _moments(arch, batch, stack, mode, backend, P, G, O, masters, n_layer, stage_layers, shapes)
    buckets = {b: max(mo[b] for mo in moments.values()) for b in BUCKETS}
    attention = attention_backward(arch, max(micro_batch_sizes(batch, stack.micro_batches)), batch, stack, backend)
    buckets["workspace"] = max(buckets["workspace"], attention)
    if zero >= 2:  # one layer's full gradient and its flat copy while it is reduce-scattered
        buckets["gradient"] += 2 * w * n_layer
        terms.append(("gradient", Term("one layer reduced", f"2·{w}·n_layer", 2 * w * n_layer)))
    worst = max(micro_batch_sizes(batch, stack.micro_batches))
    act = activation_moments(arch, worst, stack, mode, 4 if backend == "numpy" else None, batch, stage_layers)
    for name in ("forward end", "recompute"):
        terms += [("activation", t._replace(name=f"{name}: {t.name}")) for t in act[name]]
    terms.append(("workspace", Term("logits (fp32)", "4·N·V", 4 * worst * arch.seq * arch.vocab)))
    terms.append(("workspace", Term("optimizer temporaries, ids, targets", "c·4·n_max + 16·B·s",
                                    moments["optimizer step"]["workspace"])))
    name, top = max(moments.items(), key=lambda kv: sum(kv[1].values()))
    host = states.get("host", 0)
    if stack.offload and not half:  # the host master copy of each device parameter
        host += 4 * n_stage / (ranks if zero else 1)
    return Breakdown(arch, batch, stack, mode, buckets, sum(top.values()), name, moments, host, terms)


def _moments(arch, batch, stack, mode, backend, P, G, O, masters, n_layer, stage_layers, shapes):
    """``{moment: {bucket: bytes}}``: the end of the last layer, the loss, the recomputation of
    the last checkpointed segment (for the first micro-batch, with no gradients yet, and for a
    later one), and the optimizer step."""
    p, half = stack.pipeline, is_half(stack.precision)
    w = 2 if half else 4
    sizes = micro_batch_sizes(batch, stack.micro_batches)
    in_flight = pipeline_in_flight(0, p, stack.micro_batches, stack.schedule)
    compute = 4 if backend == "numpy" else None
    shards = stack.ranks if stack.zero >= 2 else 1  # ZeRO-2/3 reduce-scatter each layer's gradients
    moments = {}
    for later, m in [(False, sizes[0])] + ([(True, max(sizes[1:]))] if len(sizes) > 1 else []):
        act = activation_moments(arch, m, stack, mode, compute, batch, stage_layers)
        suffix = " (later micro-batch)" if later else ""
        g = G if later or p > 1 else 0
        # On a pipeline stage the earlier micro-batches in flight wait with their activations.
        waiting = (in_flight - 1) * total(act["waiting"])
        moments["last layer" + suffix] = dict(parameter=P, gradient=g, optimizer=O,
                                              activation=waiting + total(act["last layer"]),
                                              workspace=layer_transient(arch, m, batch, stack, backend))
        moments["loss" + suffix] = dict(parameter=P, gradient=g, optimizer=O,
                                        activation=waiting + total(act["forward end"]),
                                        workspace=4 * m * arch.seq * arch.vocab + 4)
        if act["recompute"]:
            # Recomputing segment j keeps the inputs of segments 0..j and collects the gradients
            # of every layer after it: the total is linear in j, so its largest value is at the
            # last checkpointed segment or at the first.
            kept, size, last = segments(stage_layers, stack.recompute)
            per_input = act["recompute"][-2].bytes // kept
            head_side = parameter_total(shapes) - n_layer * arch.layers - _embedding_count(arch)
            flowing = 4 * (4 if backend == "numpy" or not half else 2) * m * arch.seq * arch.hidden \
                + 8 * batch * arch.seq + 8
            for j, where in ((kept - 1, "last"), (0, "first")):
                done = head_side + n_layer * (last + (kept - 1 - j) * size)
                moments[f"recompute ({where} segment){suffix}"] = dict(
                    parameter=P, gradient=g if (later or p > 1) else divide(w * done, shards), optimizer=O,
                    activation=waiting + total(act["recompute"]) - (kept - 1 - j) * per_input,
                    workspace=flowing)
    scratch = 0 if stack.offload else max(scratch_bytes(stack.optimizer, s) for s in set(shapes))
    moments["optimizer step"] = dict(parameter=P, gradient=G + masters, optimizer=O, activation=0,
                                     workspace=16 * batch * arch.seq + scratch)
    return moments


def _embedding_count(arch):
    return arch.vocab * arch.hidden + (arch.seq * arch.hidden if arch.positions == "learned" else 0)


