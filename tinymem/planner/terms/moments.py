"""The moments of a step that the closed form evaluates, and the saved tensors at each.

The activation bucket peaks at the end of a forward or while the last checkpointed segment is
recomputed; the step itself may peak when the last layer has just computed its output (the
residual stream's copies beside every saved tensor), at the loss (the fp32 logits), during the
recomputation (the gradients collected so far) or in the optimizer step. Each function here
gives one moment's terms, with its formula; :func:`tinymem.planner.terms.analytic.breakdown` adds them.

Checkpoint segments are cut as ``checkpoint_sequential`` cuts them: c = L (``"full"``: every
layer its own segment) or ceil(sqrt(L)) (``"sqrt"``) segments of floor(L/c) layers; the last
segment runs plainly (backward needs it at once), the others keep only their input.

A ``stack`` here is resolved (:class:`~..inputs.Resolved`: its width, device and storage read,
never looked up), but in :func:`transient_bound`, an entry that resolves its own.
"""
import math

import numpy as np

from ..inputs import device, resolve
from ..model import architectures as archs
from .activations import INT8_GROUP, Term, layer_terms, stored_bytes

def micro_batch_sizes(batch, micro_batches):
    """Sizes of the micro-batches ``batch`` splits into (``techniques.microbatch.split_batch``)."""
    if not 1 <= micro_batches <= batch:
        raise ValueError(f"micro_batches must be between 1 and the batch ({batch}), got {micro_batches}")
    bounds = np.linspace(0, batch, micro_batches + 1).round().astype(int)
    return [int(b - a) for a, b in zip(bounds, bounds[1:])]


def micro_batch_extremes(batch, micro_batches):
    """``(first, largest, largest after the first)`` of :func:`micro_batch_sizes`, without the
    list (a pipeline of a million stages feeds a million micro-batches): every size is
    floor(B/k) or ceil(B/k), the first is round(B/k) as the split rounds it, and a later one is
    the ceiling when the later ones hold more than k - 1 floors."""
    if not 1 <= micro_batches <= batch:
        raise ValueError(f"micro_batches must be between 1 and the batch ({batch}), got {micro_batches}")
    low = batch // micro_batches
    first = int(np.round(batch / micro_batches))
    largest = low + (batch % micro_batches > 0)
    later = low + (batch - first > low * (micro_batches - 1)) if micro_batches > 1 else 0
    return first, largest, later


def segments(layers, recompute):
    """``(kept, size, last)``: checkpointed segments kept as inputs, layers per checkpointed
    segment, layers of the last segment (run plainly), as ``checkpoint_sequential`` cuts them."""
    if recompute in ("none", "selective"):
        return 0, 0, layers
    count = layers if recompute == "full" else max(1, math.ceil(math.sqrt(layers)))
    size = layers // count
    return count - 1, size, layers - (count - 1) * size


def vocab_share(arch, tensor):
    """Vocabulary columns one of ``tensor`` ranks holds: Megatron's output layer and cross-entropy
    are vocab-parallel, so a rank's logits and probabilities are N·V/t (Korthikanti et al. 4.3)."""
    return -(-arch.vocab // tensor)


def head_terms(arch, batch, held, storage, loss_storage, mode, tensor=1, sequence_parallel=False):
    """Saved tensors outside the layers: token ids and targets (int64, of the ``held`` sequences:
    micro-batches are views of the whole batch), positions, final norm, head input, the loss's
    probabilities (fp32 unless int8: the loss runs outside the half model). Over ``tensor`` ranks
    the probabilities are split by vocabulary, and with ``sequence_parallel`` the final norm's
    and the head's inputs by sequence (2·N·h/t each, the paper's Section 4.3)."""
    s, h, n = arch.seq, arch.hidden, batch * arch.seq
    st = "fp16" if mode == "korthikanti" else storage
    split = tensor if sequence_parallel else 1
    rows = [Term("token ids", "8·B·s", 8 * held * s)]
    if arch.positions == "learned":
        rows.append(Term("positions", "8·s", 8 * s))
    rows += [Term("final norm x-hat", "N·h", stored_bytes(-(-n * h // split), st)),
             Term("final norm 1/std", "N", stored_bytes(-(-n // split), st)),
             Term("head input", "N·h", stored_bytes(-(-n * h // split), st)),
             Term("loss probabilities", "N·V", stored_bytes(n * vocab_share(arch, tensor), loss_storage)),
             Term("targets", "8·B·s", 8 * held * s)]
    return rows


def activation_moments(arch, batch, stack, mode="tinymem", compute=None, held=None, layers=None):
    """Activation terms at three moments of one micro-batch of ``batch`` sequences over
    ``layers`` layers (default: all): ``"last layer"`` (its output just computed), ``"forward
    end"`` (the loss computed) and ``"recompute"`` (the last checkpointed segment recomputed in
    backward; empty without checkpoints), and what a micro-batch keeps while it ``"waiting"``
    for its backward on a pipeline stage. Returns ``{moment: [Term]}``. With tensor parallelism
    (``stack.tensor`` > 1) the layers are counted as Korthikanti et al. count Megatron's, split
    over the tensor-parallel ranks (and with ``sequence_parallel`` the rest too), whatever the
    mode: tinymem has no tensor-parallel layers to count. ``arch``: an Arch (resolved at the door)."""
    layers = arch.layers if layers is None else layers
    storage = stack.saved
    per_layer = "selective" if stack.recompute == "selective" else "none"
    if stack.tensor > 1:  # tensor-parallel layers are Megatron's: their saved tensors as Korthikanti et al. count
        mode = "korthikanti"
    options = dict(mode=mode, attention=stack.attention, storage="fp16" if mode == "korthikanti" else storage,
                   tensor_parallel=stack.tensor, sequence_parallel=stack.sequence_parallel,
                   ffn=archs.ffn(arch), mlp=arch.mlp, norm=arch.norm, dropout=arch.dropout,
                   kv_heads=archs.kv_heads(arch), experts=arch.experts, top_k=arch.top_k)
    layer = total(layer_terms(arch.seq, batch, arch.hidden, arch.heads, recompute=per_layer, compute=compute,
                              **options))
    if compute is None:  # the compute dtype follows the precision, whatever the storage
        compute = stack.width.compute
    kept_input = total(layer_terms(arch.seq, batch, arch.hidden, arch.heads, recompute="full",
                                    compute=compute, **options))
    kept, size, last = segments(layers, stack.recompute)
    loss_storage = "int8" if storage == "int8" else "fp32"
    head = head_terms(arch, batch, batch if held is None else held, storage, loss_storage, mode,
                      stack.tensor, stack.sequence_parallel)
    embed = [t for t in head if t.name in ("token ids", "positions")]
    inputs = [Term(f"kept segment inputs ({kept})", "kept·input", kept * kept_input)] if kept else []
    through = embed + inputs + [Term(f"layers run plainly ({last})", "last·layer", last * layer)]
    recompute = embed + inputs + [Term(f"one recomputed segment ({size})", "size·layer", size * layer)]
    # A micro-batch waiting for its backward on a pipeline stage: every segment checkpointed.
    count = {"full": layers, "sqrt": max(1, math.ceil(math.sqrt(layers)))}.get(stack.recompute, 0)
    waiting = embed + ([Term(f"segment inputs ({count})", "segments·input", count * kept_input)] if count
                       else [Term(f"layers ({layers})", "L·layer", layers * layer)])
    return {"last layer": through, "forward end": through + [t for t in head if t not in embed],
            "recompute": recompute if kept else [], "waiting": waiting}


def pipeline_in_flight(stage, stages, micro_batches, schedule="1f1b"):
    """Micro-batches whose activations pipeline ``stage`` (0 = first) holds at once: GPipe runs
    every forward before any backward (m); 1F1B starts backward as soon as the last stage can,
    so stage i holds min(p - i, m) (Narayanan et al. 2021)."""
    if not 0 <= stage < stages:
        raise ValueError(f"stage must be in 0..{stages - 1}, got {stage}")
    if schedule == "gpipe":
        return micro_batches
    if schedule == "1f1b":
        return min(stages - stage, micro_batches)
    raise ValueError(f"unknown pipeline schedule {schedule!r}; choose gpipe or 1f1b")


def step_moments(arch, batch, stack, mode, states, masters, scratch, stage_layers, head_side):
    """The moments of one step, its attention backward and their terms, for
    :func:`~.analytic.evaluate`: ``(moments, attention, terms)``. ``moments`` is ``{moment:
    {bucket: bytes}}``: the end of the last layer, the loss, the recomputation of the last
    checkpointed segment (for the first micro-batch, with no gradients yet, and for a later one),
    and the optimizer step; ``attention`` the workspace of attention's backward; ``terms``
    ``[(bucket, Term)]`` of the activations and the workspace. ``states``: the model states
    (parameter, gradient, optimizer bytes) beside them; ``masters``: the fp32 master gradients of
    the step; ``scratch``: the update's temporaries; ``head_side``: the parameters outside the
    layers and the embedding."""
    (P, G, O), p, w = states, stack.pipeline, stack.width.weight
    n_layer = archs.layer_parameter_count(arch)
    first, _, later_size = micro_batch_extremes(batch, stack.micro_batches)
    in_flight = pipeline_in_flight(0, p, stack.micro_batches, stack.schedule)
    compute = 4 if stack.device.compute == "numpy" else None
    shards = stack.ranks if stack.zero >= 2 else 1  # ZeRO-2/3 reduce-scatter each layer's gradients
    streamed = stack.kind in ("zero-offload", "zero-offload-params")  # sent to the host
    moments = {}
    for later, m in [(False, first)] + ([(True, later_size)] if stack.micro_batches > 1 else []):
        act = activation_moments(arch, m, stack, mode, compute, batch, stage_layers)
        suffix = " (later micro-batch)" if later else ""
        g = G if later or p > 1 else 0
        # On a pipeline stage the earlier micro-batches in flight wait with their activations.
        waiting = (in_flight - 1) * total(act["waiting"])
        moments["last layer" + suffix] = dict(parameter=P, gradient=g, optimizer=O,
                                              activation=waiting + total(act["last layer"]),
                                              workspace=layer_transient(arch, m, batch, stack))
        moments["loss" + suffix] = dict(parameter=P, gradient=g, optimizer=O,
                                        activation=waiting + total(act["forward end"]),
                                        workspace=4 * m * arch.seq * vocab_share(arch, stack.tensor) + 4)
        if stack.saved == "int8":
            # The loss packs its probabilities before it saves the targets: the fp32 logits and
            # probabilities and the targets live beside the packing's temporaries.
            values, targets = m * arch.seq * vocab_share(arch, stack.tensor), 8 * batch * arch.seq
            moments["loss: packing the probabilities" + suffix] = dict(
                parameter=P, gradient=g, optimizer=O,
                activation=waiting + total(act["forward end"]) - stored_bytes(values, "int8") - targets,
                workspace=8 * values + targets + packing_bytes(values))
        if act["recompute"]:
            # Recomputing segment j keeps the inputs of segments 0..j and collects the gradients
            # of every layer after it: the total is linear in j, so its largest value is at the
            # last checkpointed segment or at the first.
            kept, size, last = segments(stage_layers, stack.recompute)
            per_input = act["recompute"][-2].bytes // kept
            flowing = 4 * stack.compute * m * arch.seq * arch.hidden + 8 * batch * arch.seq + 8
            for j, where in ((kept - 1, "last"), (0, "first")):
                done = (head_side + n_layer * (last + (kept - 1 - j) * size)) / stack.tensor
                moments[f"recompute ({where} segment){suffix}"] = dict(
                    parameter=P, gradient=g if (later or p > 1 or streamed) else w * done / shards, optimizer=O,
                    activation=waiting + total(act["recompute"]) - (kept - 1 - j) * per_input,
                    workspace=flowing)
    moments["optimizer step"] = dict(parameter=P, gradient=G + masters, optimizer=O, activation=0,
                                     workspace=16 * batch * arch.seq + scratch)
    worst = micro_batch_extremes(batch, stack.micro_batches)[1]
    terms = []
    act = activation_moments(arch, worst, stack, mode, compute, batch, stage_layers)
    for name in ("forward end", "recompute"):
        terms += [("activation", t._replace(name=f"{name}: {t.name}")) for t in act[name]]
    logits = 4 * worst * arch.seq * vocab_share(arch, stack.tensor)  # vocab-parallel over t ranks
    terms.append(("workspace", Term("logits (fp32)", "4·N·V/t", logits)))
    if stack.saved == "int8":
        packing = max(mo["workspace"] for name, mo in moments.items() if name.startswith("loss: packing"))
        terms.append(("workspace", Term("loss packing its probabilities (int8)", "8·N·V + 8·B·s + 4·N·V + 10·p",
                                        packing)))
    terms.append(("workspace", Term("optimizer temporaries, ids, targets", "c·4·n_max + 16·B·s",
                                    moments["optimizer step"]["workspace"])))
    return moments, attention_backward(arch, worst, batch, stack), terms


def total(terms):
    return sum(t.bytes for t in terms)


def packing_bytes(count):
    """Workspace while int8 storage packs one saved float tensor of n = ``count`` values
    (``techniques.quantization.compress``): its float32 copy 4·n, padded to p = 256·ceil(n/256)
    values in a new array 4·p when n is not a multiple of 256 (the first copy stays alive, a
    view of it fills the padding), the finite and above-the-minimum masks p + p, and the values
    above the minimum 4·p: 4·n + 10·p bytes, 10·n without padding. 3.5 float32 arrays of the
    tensor's size, beside the tensor itself."""
    padded = _padded(count)
    return 10 * padded + (4 * count if padded != count else 0)


def layer_transient(arch, batch, held, stack):
    """Workspace when the last layer has just computed its output: the residual stream's live
    copies (the embedding output, the layer's input, its midpoint, the MLP output and the sum:
    5·c·N·h; 4 with one layer), the targets (8·B·s) and, when saved tensors are stored below the compute dtype,
    the MLP's last input in the compute dtype (c·N·f); on NumPy a half layer also holds its
    upcast fc2 weights (4·(f·h + h)) while that Linear runs."""
    storage, c = stack.saved, stack.compute
    half = stack.width.weight == 2
    n, h, f = batch * arch.seq, arch.hidden, archs.ffn(arch)
    copies = 5 if arch.layers > 1 else 4  # with one layer its input is the embedding output
    out = copies * c * n * h + 8 * held * arch.seq
    if stored_bytes(1 << 16, storage) < c << 16:
        out += c * n * f
    if stack.device.compute == "numpy" and half:
        out += 4 * (f * h + (h if arch.bias else 0))
    return out


def attention_saved(arch, batch, stack):
    """Values of each tensor attention saves for backward, in the order it saves them: q, k, v
    (N·h each) and the weights a·b·s²; chunked: q, k, v, the output and the log-sum-exp a·b·s."""
    n = batch * arch.seq
    if stack.attention == "chunked":
        return [n * arch.hidden] * 4 + [arch.heads * batch * arch.seq]
    return [n * arch.hidden] * 3 + [arch.heads * batch * arch.seq ** 2]


def _padded(count):
    """Values of an int8-stored tensor of ``count`` values once padded to whole groups."""
    return INT8_GROUP * math.ceil(count / INT8_GROUP)


def attention_backward(arch, batch, held, stack):
    """Workspace while attention runs its backward: the saved q, k, v and weights are released
    beside the gradients flowing (4·c·N·h), the targets 8·B·s and two scalars:
    S(3·N·h) + S(a·b·s²) + 4·c·N·h + 8·B·s + 8, S the stored bytes. (The gradient of the
    attention output is not among them: the engine lets go of a node's incoming gradients
    before the next node's backward runs.) Chunked attention saves the output and one log-sum-exp per row instead of the
    weights: S(4·N·h) + S(a·b·s) in place of the first two terms. With int8 storage the packed
    bytes stay in ``activation`` and backward decodes each saved tensor of n values into a
    float32 array of its padded size, 4·p with p = 256·ceil(n/256), the last one beside its
    one-byte mask of code 0 (p): 4·Σp + p_last in place of the S terms. The largest op's
    workspace of a Transformer's step as the ledger counts it (an op's own temporaries, such as
    the softmax gradient or a chunk's scores, are the allocator's)."""
    if stack.recompute == "selective":
        return 0
    storage, c = stack.saved, stack.compute
    n, saved = batch * arch.seq, attention_saved(arch, batch, stack)
    if storage == "int8":
        padded = [_padded(count) for count in saved]
        released = 4 * sum(padded) + padded[-1]
    else:
        released = sum(stored_bytes(count, storage) for count in saved)
    return released + 4 * c * n * arch.hidden + 8 * held * arch.seq + 8


def transient_bound(arch, batch, stack, backend="gpu"):
    """How far above :attr:`Breakdown.peak` a real step may go between the moments modelled.

    An op's output exists beside its inputs before the next op frees them, and in backward an
    op's incoming gradient beside the gradients it returns (and a parameter's new gradient
    beside its ``.grad`` while the two are added) and the op's own workspace (GELU's backward
    keeps one buffer of its input's size beside the two, LayerNorm's two of N·h), and a
    residual stream has an array or two more alive than at the moments above: at most three
    outputs of the largest op, max(c·N·f, 4·N·V, 4·a·b·s², 4·n_max), plus two residual arrays
    2·c·N·h; with int8 storage a saved tensor also exists in the compute dtype while it is
    packed (one more op output), and backward decodes each saved tensor of n values into a
    float32 array of whole groups, 4·p with p = 256·ceil(n/256), not 4·n: attention's backward,
    which decodes the most tensors at once (five, chunked), holds Σ 4·(p − n) more over its
    saved tensors than the op outputs above count (at most 5·1,020 B at any size).
    Bytes."""
    arch = archs.get_arch(arch)
    stack = resolve(stack, arch, batch, device(backend))  # 2.5 sequences gave a bound; -1, a division by zero
    c = stack.compute
    m = micro_batch_extremes(batch, stack.micro_batches)[1]
    n, h = m * arch.seq, arch.hidden
    n_max = max(math.prod(s) for s in archs.shape_counts(arch))
    largest = max(c * n * archs.ffn(arch), 4 * n * arch.vocab, 4 * arch.heads * m * arch.seq ** 2, 4 * n_max)
    if stack.saved != "int8":
        return largest * 3 + 2 * c * n * h
    padding = sum(4 * (_padded(count) - count) for count in attention_saved(arch, m, stack))
    return largest * 4 + 2 * c * n * h + padding
