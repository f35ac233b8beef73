"""Activation bytes of a decoder-only Transformer layer, saved tensor by saved tensor.

Two ways of counting (``mode``), N = b·s tokens of a micro-batch of b sequences of s tokens,
h hidden, a heads, f the MLP width, t tensor-parallel ranks:

``"tinymem"``: every array tinymem's own ``TransformerBlock`` saves for backward, each stored in
``storage`` (fp32: 4 bytes per value, fp16/bf16: 2, int8: 1 plus 12 bytes per group of 256)::

    ln1: x-hat N·h and 1/std N  (LayerNorm saves its normalised input, not its input)
    attention: projection input N·h; q, k, v 3·N·h (views of the projection output);
               weights b·a·s² (plain) | output N·h and log-sum-exp b·a·s (chunked);
               output-projection input N·h (the heads merged into a new array)
    ln2: N·h and N;  MLP: fc1 input N·h, GELU input f·N, fc2 input f·N; dropout mask N·h bytes
    fp32, no dropout: 4·N·(16h + 2) + 4·b·a·s² = 4·(16·N·h + 2N + a·b·s²) with f = 4h

``"korthikanti"``: what Korthikanti et al. (2022) count per layer, 16-bit values and 1-byte
dropout masks: 11·sbh + 5·a·s²·b in attention (input 2, q and k 4, softmax 2as²b, its dropout
mask as²b and output 2as²b, v 2, projection input 2, dropout mask 1), 19·sbh in the MLP (input 2,
GELU input 8, fc2 input 8, mask 1), 4·sbh in two LayerNorms: s·b·h·(34 + 5·a·s/h) bytes. With t
tensor-parallel ranks the terms inside the parallel region are divided by t (10 + 24/t + 5as/(ht));
sequence parallelism divides the rest too (34/t + 5as/(ht)).

``recompute``: ``"none"``; ``"selective"`` (the attention core, softmax(qk^T)v, is recomputed:
the a·s²·b terms go); ``"full"`` (only the layer input is kept: 2·sbh in the paper's count, and
in tinymem the input in the compute dtype, saved past any storage hook: ``compute`` bytes per
value). How many layers are recomputed, and the head of the model, are in :mod:`.analytic`.

In mode "korthikanti" a LLaMA-style layer follows the paper's rules (16-bit values; it trains
without dropout, so no masks; SwiGLU saves 4·2·sbf; RMSNorm its input as LayerNorm does);
grouped-query attention saves k and v of s·b·kv values (kv = kv_heads·h/a); a mixture of experts
saves its MLP tensors top_k times and the router's probabilities.

SwiGLU MLPs and RMSNorm (LLaMA) are counted as the equivalent tinymem ops would save them: a fused
SiLU saving its input (PyTorch's F.silu), and RMSNorm saving x-hat and 1/rms like LayerNorm;
tinymem has no such layers, so these terms are not checked against the ledger. Rotary position
embeddings rotate q and k into new arrays that attention saves instead of the unrotated ones
(LLaMA projects q, k and v separately), which leaves the count unchanged.
"""
import math
from collections import namedtuple

from ...checks import is_int, positive_int

Term = namedtuple("Term", "name formula bytes")
Term.__doc__ = "One saved tensor (or group): its name, its size as a formula, its bytes."

STORAGES = ("fp32", "fp16", "bf16", "int8")
RECOMPUTES = ("none", "selective", "full")
ATTENTIONS = ("plain", "chunked")
MODES = ("tinymem", "korthikanti")
INT8_GROUP, INT8_GROUP_BYTES = 256, 12  # tinymem's compress(): start, step and min per group


def itemsize(storage):
    """Bytes per value of a float stored as ``storage`` (int8: the codes alone)."""
    sizes = {"fp32": 4, "fp16": 2, "bf16": 2, "int8": 1}
    if storage not in sizes:
        raise ValueError(f"unknown storage {storage!r}; choose one of {', '.join(STORAGES)}")
    return sizes[storage]


def stored_bytes(n, storage):
    """Bytes of one float tensor of ``n`` values stored as ``storage``.

    int8 (``techniques.quantization.compress_saved_activations``): one byte per value, the last
    group padded to 256, plus start, step and minimum (12 bytes) per group: 268·ceil(n/256)."""
    if storage == "int8":
        return (INT8_GROUP + INT8_GROUP_BYTES) * math.ceil(n / INT8_GROUP)
    return itemsize(storage) * n


def _check(mode, recompute, attention, storage):
    for value, allowed, what in ((mode, MODES, "mode"), (recompute, RECOMPUTES, "recompute"),
                                 (attention, ATTENTIONS, "attention"), (storage, STORAGES, "storage")):
        if value not in allowed:
            raise ValueError(f"unknown {what} {value!r}; choose one of {', '.join(allowed)}")


def _sizes(seq, batch, hidden, heads, kv_heads, ffn, experts, top_k, tensor_parallel):
    """The sizes as ints, refused with a message when one is not a positive integer or the
    heads do not split the hidden size (7 heads of 768 gave numbers, heads 0 divided by zero)."""
    named = dict(seq=seq, batch=batch, hidden=hidden, heads=heads, experts=experts, top_k=top_k,
                 tensor_parallel=tensor_parallel, kv_heads=heads if kv_heads is None else kv_heads,
                 ffn=4 * hidden if ffn is None and is_int(hidden) else ffn)
    sizes = {k: positive_int(k, v) for k, v in named.items()}
    if sizes["hidden"] % sizes["heads"]:
        raise ValueError(f"hidden size {hidden} is not divisible by {heads} heads: each head has hidden/heads values")
    if sizes["heads"] % sizes["kv_heads"]:
        raise ValueError(f"{kv_heads} kv heads do not divide {heads} query heads (grouped-query attention)")
    if sizes["top_k"] > sizes["experts"]:
        raise ValueError(f"top_k ({top_k}) cannot exceed the {experts} experts")
    return sizes


def layer_terms(seq, batch, hidden, heads, mode="tinymem", recompute="none", attention="plain",
                storage="fp32", compute=None, ffn=None, mlp="gelu", norm="layernorm", dropout=0.0,
                tensor_parallel=1, sequence_parallel=False, kv_heads=None, experts=1, top_k=1):
    """The saved tensors of one layer as :class:`Term` rows (see the module docstring).

    ``compute``: bytes per value of the layer input that full recomputation keeps (default: 4
    for fp32 and int8 storage, 2 for fp16/bf16; tinymem on NumPy computes in float32, so 4).
    It also says whether fp16 is computed as stored (None, a GPU) or in float32 (4, NumPy): only
    then is chunked attention's merged output a view of the saved one.
    ``kv_heads``: grouped-query attention saves k and v of N·kv·h/a values each; ``experts`` and
    ``top_k``: each token's MLP tensors top_k times, and the router's probabilities N·E.
    """
    _check(mode, recompute, attention, storage)
    z = _sizes(seq, batch, hidden, heads, kv_heads, ffn, experts, top_k, tensor_parallel)
    s, b, h, a, f = z["seq"], z["batch"], z["hidden"], z["heads"], z["ffn"]
    kv = z["kv_heads"] * (h // a)  # width of k and of v
    if mode == "korthikanti":
        return _korthikanti(s, b, h, a, kv, f, recompute, z["tensor_parallel"], sequence_parallel, mlp,
                            z["top_k"], z["experts"])
    if tensor_parallel != 1 or sequence_parallel:
        raise ValueError("tensor and sequence parallelism are modelled in mode='korthikanti' only "
                         "(tinymem has no tensor-parallel layers)")
    n = b * s
    if recompute == "full":
        c = (4 if storage in ("fp32", "int8") else 2) if compute is None else int(compute)
        return [Term("layer input", f"{c}·N·h", c * n * h)]

    def term(name, formula, count):
        return Term(name, formula, stored_bytes(count, storage))

    rows = [term("norm1 x-hat", "N·h", n * h), term("norm1 1/std", "N", n),
            term("attention projection input", "N·h", n * h), term("attention q", "N·h", n * h)]
    rows += [term(f"attention {x}", "N·h" if kv == h else "N·kv·h/a", n * kv) for x in "kv"]
    if attention == "plain" and recompute != "selective":
        rows.append(term("attention weights", "a·b·s²", a * b * s * s))
    elif attention == "chunked":
        rows += [term("attention output", "N·h", n * h), term("attention log-sum-exp", "b·a·s", b * a * s)]
    # The layer computes in the dtype it stores: float32, or float16 on a GPU (compute None;
    # on NumPy float16 is computed in float32 and each saved tensor is a rounded copy).
    stored_as_computed = storage == "fp32" or (storage == "fp16" and compute is None)
    if attention == "chunked" and 1 in (a, s, h // a) and stored_as_computed:
        # One head, one token or heads of width one: merging the heads is a view of the saved
        # output, which the ledger counts once.
        rows.append(Term("output projection input (a view of the output)", "0", 0))
    else:
        rows.append(term("output projection input", "N·h", n * h))
    rows += [term("norm2 x-hat", "N·h", n * h),
             term("norm2 1/std", "N", n)]
    k = z["top_k"]
    routed = "" if k == 1 else f" (x{k} experts)"
    if mlp == "gelu":
        mlp_rows = [("fc1 input", "N·h", n * h), ("GELU input", "N·f", n * f), ("fc2 input", "N·f", n * f)]
    else:
        mlp_rows = [("gate/up input", "N·h", n * h), ("SiLU input (gate output)", "N·f", n * f),
                    ("SiLU output", "N·f", n * f), ("up output", "N·f", n * f), ("down input", "N·f", n * f)]
    rows += [Term(name + routed, (f"{k}·" if k > 1 else "") + formula, k * stored_bytes(count, storage))
             for name, formula, count in mlp_rows]
    if z["experts"] > 1:
        rows.append(term("router probabilities", "N·E", n * z["experts"]))
    if dropout:
        rows.append(Term("MLP dropout mask", "N·h (1 byte)", n * h))
    return rows


def _korthikanti(s, b, h, a, kv, f, recompute, t, sp, mlp, top_k, experts):
    """Korthikanti et al.'s 16-bit count; for a LLaMA-style layer (SwiGLU, RMSNorm, no dropout)
    the same rules: every saved tensor 2 bytes a value, no dropout masks, SwiGLU's four N·f
    tensors (SiLU input and output, up output, down input), grouped-query k and v of N·kv."""
    sbh = s * b * h
    out = t if sp else 1  # what lies outside the tensor-parallel region: split only by sequence parallelism
    if recompute == "full":
        return [Term("layer input", "2·sbh", 2 * sbh / out)]
    gpt = mlp == "gelu"
    rows = [Term("attention: QKV input", "2sbh", 2 * sbh / out)]
    if kv == h:
        rows.append(Term("attention: Q and K", "4sbh", 4 * sbh / t))
    else:
        rows.append(Term("attention: Q and K (grouped)", "2sbh + 2sb·kv", (2 * sbh + 2 * s * b * kv) / t))
    if recompute != "selective":
        rows.append(Term("attention: softmax output", "2as²b", 2 * a * s * s * b / t))
        if gpt:
            rows += [Term("attention: softmax dropout mask", "as²b", a * s * s * b / t),
                     Term("attention: softmax dropout output", "2as²b", 2 * a * s * s * b / t)]
    rows += [Term("attention: V", "2sbh" if kv == h else "2sb·kv", 2 * s * b * kv / t),
             Term("attention: projection input", "2sbh", 2 * sbh / t)]
    if gpt:
        rows += [Term("attention: dropout mask", "sbh", sbh / out), Term("MLP: fc1 input", "2sbh", 2 * sbh / out),
                 Term("MLP: GELU input", "8sbh", top_k * 2 * s * b * f / t),
                 Term("MLP: fc2 input", "8sbh", top_k * 2 * s * b * f / t),
                 Term("MLP: dropout mask", "sbh", sbh / out)]
    else:
        rows += [Term("MLP: gate/up input", "2sbh", 2 * sbh / out),
                 Term("MLP: SiLU input and output, up output, down input", f"{top_k}·8sbf",
                      top_k * 8 * s * b * f / t)]
    if experts > 1:
        rows.append(Term("MLP: router probabilities", "2sbE", 2 * s * b * experts / out))
    rows.append(Term("LayerNorm inputs (2)" if gpt else "RMSNorm inputs (2)", "4sbh", 4 * sbh / out))
    return rows


def activations_per_layer(seq, batch, hidden, heads, mode="tinymem", recompute="none", **options):
    """Bytes one layer keeps for backward (the sum of :func:`layer_terms`).

    ``korthikanti``, none: s·b·h·(34 + 5·a·s/h); selective: 34·s·b·h; full: 2·s·b·h."""
    return sum(t.bytes for t in layer_terms(seq, batch, hidden, heads, mode, recompute, **options))


def korthikanti_formula(seq, batch, hidden, heads, recompute="none", tensor_parallel=1,
                        sequence_parallel=False):
    """The paper's closed forms (their Table 2), to hold the term-by-term count against."""
    s, b, h, a, t = seq, batch, hidden, heads, tensor_parallel
    if recompute == "full":
        return s * b * h * 2
    core = 0 if recompute == "selective" else 5 * a * s / (h * t)
    if sequence_parallel:
        return s * b * h * (34 / t + core)
    return s * b * h * (10 + 24 / t + core)


KORTHIKANTI_ROWS = (  # their Table 2: configuration -> (recompute, tensor parallel, sequence parallel)
    ("no parallelism", "none", False, False),
    ("tensor parallel (baseline)", "none", True, False),
    ("tensor + sequence parallel", "none", True, True),
    ("tensor parallel + selective recompute", "selective", True, False),
    ("tensor + sequence parallel + selective recompute", "selective", True, True),
    ("full recompute", "full", False, False),
)


def korthikanti_table(seq, batch, hidden, heads, tensor_parallel=8):
    """The rows of Korthikanti et al.'s per-layer activation table for one model: each row's
    configuration, the sum of its terms (:func:`layer_terms`) and their closed form, in bytes."""
    rows = []
    for name, recompute, tp, sp in KORTHIKANTI_ROWS:
        t = tensor_parallel if tp else 1
        terms = layer_terms(seq, batch, hidden, heads, "korthikanti", recompute, tensor_parallel=t,
                            sequence_parallel=sp)
        rows.append({"configuration": name, "terms": sum(x.bytes for x in terms),
                     "formula": korthikanti_formula(seq, batch, hidden, heads, recompute, t, sp)})
    return rows
