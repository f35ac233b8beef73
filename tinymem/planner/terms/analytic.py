"""The closed-form memory of one training step of a decoder-only Transformer, bucket by bucket.

Each term is written once, here or in :mod:`.activations` (saved tensors, layer by layer).
With n parameters (the largest one n_max), N ranks, w = 4 bytes in fp32 and 2 in fp16/bf16
(the precision's widths come from :mod:`.precision`, looked up once, at the door,
:func:`tinymem.planner.inputs.resolve`):

    parameter   w·n                          ZeRO-3: w·n/N (+ one gathered layer during its use)
    gradient    w·n                          ZeRO-2/3: w·n/N (+ one layer in flight)
                (k > 1 micro-batches add into it in place: no second copy)
                + 4·n of fp32 master gradients during the step of a half model (tinymem's
                  ``MasterOptimizer``; ZeRO-1/2/3: 4·n/N, a rank upcasts its own shard only;
                  the ZeRO paper counts none: convention "zero-paper", :mod:`.conventions`)
                ZeRO-Offload: one layer's gradients on their way to the host, w·n_layer
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
                1, Adam and most others 2, Adam8bit 5) and the token ids and targets 16·B·s;
                with int8 storage, while the loss packs its probabilities, 8·N·V (the logits
                and the probabilities) + 8·B·s (the targets, not yet saved) + 4·N·V + 10·p
                (the packing's temporaries, p = N·V padded to whole groups of 256; 10·N·V
                when nothing is padded: :func:`.moments.packing_bytes`)

The step peaks at one of a few moments, each the sum of its buckets: the end of a forward
(the loss; with int8 storage, the loss packing its probabilities), the recomputation of the
last checkpointed segment, or the optimizer step. A bucket's own peak is its largest value
over the step. :func:`breakdown` returns both: it resolves its stack at the door and hands the
resolved value to :func:`evaluate`, which asks :mod:`.sharding` once for the model states of a
step (:func:`.sharding.step_states`) and :mod:`.moments` once for its moments
(:func:`.moments.step_moments`).

Scope: tinymem's ledger counts arrays the framework registers; an op's internal temporaries
(the softmax backward's dP, GELU's tanh) are the allocator's, not the ledger's, and are left
out here as well (``tests/planner/test_analytic_exact.py`` states the bound on what remains).
"""
import math
from collections import namedtuple

from ..inputs import Resolved, Stack, TorchOptions, device, resolve
from ..model import architectures as archs
from .activations import Term, activations_per_layer, korthikanti_formula, layer_terms
from .moments import (activation_moments, attention_backward, layer_transient, micro_batch_sizes,
                      pipeline_in_flight, segments, step_moments, transient_bound)  # re-exported but step_moments
from . import torch_step
from .precision import PRECISIONS
from .sharding import (SCRATCH, model_states, optimizer_bytes, optimizer_label, parameter_total,
                       scratch_bytes, step_states)

__all__ = ["Stack", "Breakdown", "breakdown", "model_states", "PRECISIONS", "activations_per_layer",
           "korthikanti_formula", "layer_terms", "optimizer_bytes", "optimizer_label", "pipeline_in_flight", "micro_batch_sizes",
           "segments", "transient_bound", "attention_backward", "layer_transient", "activation_moments",
           "scratch_bytes", "SCRATCH", "evaluate", "Resolved"]

Breakdown = namedtuple("Breakdown", "arch batch stack mode buckets peak moment moments host terms")
Breakdown.__doc__ = """``buckets``: each bucket's peak per device (bytes); ``peak``: the largest
moment's total; ``moment``: its name; ``moments``: ``{name: {bucket: bytes}}``; ``host``: bytes
on the host (offloaded state and masters); ``terms``: ``[(bucket, Term)]`` behind the numbers."""

BUCKETS = ("parameter", "gradient", "optimizer", "activation", "workspace")


def breakdown(arch, batch=1, stack=Stack(), mode="tinymem", backend="gpu", chunks=None, fused_update=False,
              torch=None):
    """The step's memory per device for ``arch`` trained with ``stack`` on ``batch`` sequences
    per data-parallel rank (split into ``stack.micro_batches``); a :class:`Breakdown`.

    ``mode``: "tinymem" counts what tinymem's Transformer saves; "korthikanti" counts
    activations as Korthikanti et al. (model states are tinymem's in both: the ZeRO paper's and
    DeepSpeed's counts are :mod:`.conventions`). ``backend``: "gpu" computes in the precision's
    dtype; "numpy" (tinymem on the CPU) computes in fp32, so checkpointed inputs are 4 bytes a
    value and a half layer upcasts its weights while it runs. ``chunks``: the backend whose chunk
    size the optimizer's chunked loops (8-bit Adam's) take, ``backend``'s by default (CuPy
    computes bf16 in float32 as NumPy does, "numpy", but its chunks are the GPU's, "gpu").

    ``mode="torch"`` is another answer: the peak of one plain PyTorch step on one device
    (:func:`.torch_step.breakdown`, a :class:`~.torch_step.TorchBreakdown`), with ``torch`` its
    :class:`~..inputs.TorchOptions` (PyTorch's defaults when None); a stack, backend or chunks
    other than the defaults is refused with it.
    """
    arch = archs.get_arch(arch)
    if mode == "torch":
        if (stack, backend, chunks, fused_update) != (Stack(), "gpu", None, False):
            raise ValueError("mode='torch' plans one plain PyTorch step: its options are torch=TorchOptions(...), "
                             "not a stack, backend, chunks or fused_update")
        return torch_step.breakdown(arch, batch, TorchOptions() if torch is None else torch)
    if torch is not None:
        raise ValueError(f"torch=TorchOptions(...) goes with mode='torch', not mode={mode!r}")
    return evaluate(arch, batch, resolve(stack, arch, batch, device(backend, chunks, fused_update)), mode)


def evaluate(arch, batch, stack, mode="tinymem"):
    """:func:`breakdown` below the door: ``arch`` an Arch, ``stack`` a :class:`~..inputs.Resolved`
    (checked on ``arch`` and ``batch``, with its device)."""
    if not isinstance(stack, Resolved):  # a Stack raised "'Stack' object has no attribute 'width'"
        raise TypeError(f"evaluate takes a resolved stack (inputs.resolve(stack, arch, batch)); with a "
                        f"{type(stack).__name__}, call breakdown")
    wd, kind = stack.width, stack.kind
    w = wd.weight
    shapes = archs.shape_counts(arch)
    p, ranks, zero, t = stack.pipeline, stack.ranks, stack.zero, stack.tensor
    n_layer = archs.layer_parameter_count(arch) / t if t > 1 else archs.layer_parameter_count(arch)
    stage_layers = math.ceil(arch.layers / p)
    n_stage, stage_shapes = stage_parameters(arch, p, t)
    states, masters, scratch = step_states(stage_shapes, n_stage, shapes, stack)
    P, G, O = states["parameter"], states["gradient"], states["optimizer"]
    masters_named = " + fp32 masters" if wd.master else ""
    terms = [("parameter", Term("weights", f"{w}·n", P)), ("gradient", Term("gradients", f"{w}·n", G)),
             ("optimizer", Term(f"{stack.label} state" + masters_named,
                                "optim.table" + (f" + {wd.master}·n" if wd.master else ""), O))]
    if zero >= 3:  # one layer gathered in full while it computes
        P += w * n_layer
        terms.append(("parameter", Term("one gathered layer", f"{w}·n_layer", w * n_layer)))
    if masters:
        terms.append(("gradient", Term("fp32 master gradients (step)", f"{wd.master_gradient}·n", masters)))
    head_side = parameter_total(shapes) - archs.layer_parameter_count(arch) * arch.layers - _embedding_count(arch)
    moments, attention, step_terms = step_moments(arch, batch, stack, mode, (P, G, O), masters, scratch, stage_layers,
                                                  head_side)
    buckets = {b: max(mo[b] for mo in moments.values()) for b in BUCKETS}
    buckets["workspace"] = max(buckets["workspace"], attention)
    if kind in ("zero-offload", "zero-offload-params"):  # a layer's gradients on their way to the host
        buckets["gradient"] += w * n_layer
        terms.append(("gradient", Term("one layer streamed to the host", f"{w}·n_layer", w * n_layer)))
    elif zero >= 2:  # one layer's full gradient and its flat copy while it is reduce-scattered
        buckets["gradient"] += 2 * w * n_layer
        terms.append(("gradient", Term("one layer reduced", f"2·{w}·n_layer", 2 * w * n_layer)))
    terms += step_terms
    name, top = max(moments.items(), key=lambda kv: sum(kv[1].values()))
    host = states.get("host", 0)
    if kind == "optimizer" and not wd.master:  # offload_optimizer's host master of each parameter
        host += 4 * n_stage / (ranks if zero else 1)
    given = Stack._make(stack[:len(Stack._fields)])  # the stack as it came through the door
    return Breakdown(arch, batch, given, mode, buckets, sum(top.values()), name, moments, host, terms)


def stage_parameters(arch, stages=1, tensor=1):
    """``(count, {shape: how many})`` of the parameters one pipeline stage holds: the whole model
    with one stage; else ceil(L/p) layers and the busier end (token and position tables on the
    first stage, final norm and head on the last: a tied head needs the token table there too,
    as Megatron copies it), as one flat shape; with ``tensor`` t ranks, 1/t of it (a flat
    shard: Megatron splits every matrix, and the norms' few values are counted split too).
    ``arch``: an Arch (resolved at the door)."""
    shapes = archs.shape_counts(arch)
    n = parameter_total(shapes)
    if tensor > 1:
        n_stage = stage_parameters(arch, stages)[0]
        return n_stage / tensor, {(math.ceil(n_stage / tensor),): 1}
    if stages == 1:
        return n, shapes
    n_layer = archs.layer_parameter_count(arch)
    first = _embedding_count(arch)
    last = n - arch.layers * n_layer - first + (arch.vocab * arch.hidden if arch.tied else 0)
    n_stage = math.ceil(arch.layers / stages) * n_layer + max(first, last)
    return n_stage, {(n_stage,): 1}


def _embedding_count(arch):
    return arch.vocab * arch.hidden + (arch.seq * arch.hidden if arch.positions == "learned" else 0)


