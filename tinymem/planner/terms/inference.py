"""Inference memory by formula: the weights at a storage width, the KV cache, the largest
layer's workspace.

For a model of n parameters generating with a batch of B sequences of up to S tokens:

    weights      n·q bytes: q = 4 (fp32), 2 (bf16/fp16), 1 (int8), 0.5 (int4), as accelerate's
                 ``estimate-memory`` counts them (``accelerate/commands/estimate.py``,
                 ``gather_data``: the fp32 size divided by 2, 4 or 8)
    scales       quantized weights also keep one fp16 scale per group of 128 values: 2·n/128
                 (the group size of GPTQ and AWQ; accelerate leaves scales out)
    KV cache     2·L·kv·d·S·B·c: k and v of every layer, kv heads of width d = h/a, c bytes a
                 value (2 for a bf16 cache); grouped-query attention is what makes it small
    workspace    the largest layer's temporaries while the prompt is read (prefill, all S
                 tokens at once): the MLP's inner activations (SwiGLU: gate and up, 2·B·S·f·2;
                 GELU: B·S·f·2; a mixture: top_k of them), the attention scores when attention
                 is not fused (B·a·S²·2; none with a flash kernel), the largest matrix
                 dequantized to bf16 for quantized weights, two residual-stream copies
                 2·B·S·h·2 and the last token's logits B·V·4

accelerate's own table counts the model as ``AutoModel`` builds it: the base model without the
LM head (an untied head's V·h parameters are not in its total) and reports the largest of the
token table and one decoder block as its largest layer, in units of 2^30 bytes.
"""
from collections import namedtuple

from ..model import architectures as archs

WEIGHT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "int8": 1, "int4": 0.5}
SCALE_GROUP = 128
Term = namedtuple("Term", "name formula bytes")


def _check(weights, batch, context, kv_bytes):
    if weights not in WEIGHT_BYTES:
        raise ValueError(f"unknown weights {weights!r}; choose one of {', '.join(WEIGHT_BYTES)}")
    for name, value in (("batch", batch), ("context", context)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    if kv_bytes not in (1, 2, 4):
        raise ValueError(f"kv_bytes must be 1 (int8/fp8), 2 (bf16) or 4 (fp32), got {kv_bytes!r}")


def kv_cache_bytes(arch, batch, context, kv_bytes=2):
    """2·L·kv_heads·head_dim·S·B·bytes."""
    arch = archs.get_arch(arch)
    return 2 * arch.layers * archs.kv_heads(arch) * (arch.hidden // arch.heads) * context * batch * kv_bytes


def workspace_terms(arch, batch, context, weights="bf16", flash=True):
    """The largest layer's temporaries during prefill (see the module docstring)."""
    arch = archs.get_arch(arch)
    tokens, f = batch * context, archs.ffn(arch)
    inner = (2 if arch.mlp == "swiglu" else 1) * arch.top_k
    rows = [Term("MLP inner activations", f"{inner}·B·S·f·2", inner * tokens * f * 2),
            Term("residual stream (2 copies)", "2·B·S·h·2", 2 * tokens * arch.hidden * 2),
            Term("last token's logits (fp32)", "B·V·4", batch * arch.vocab * 4)]
    if not flash:
        rows.append(Term("attention scores", "B·a·S²·2", batch * arch.heads * context ** 2 * 2))
    if WEIGHT_BYTES[weights] < 2:
        largest = max(a * b for a, b in (s for s in archs.shape_counts(arch) if len(s) == 2))
        rows.append(Term("largest matrix dequantized to bf16", "2·rows·columns", 2 * largest))
    return rows


def plan(arch, batch=1, context=None, weights="bf16", kv_bytes=2, flash=True):
    """``[Term]``: weights, scales, KV cache and workspace for generating with ``arch``."""
    arch = archs.get_arch(arch)
    context = arch.seq if context is None else context
    _check(weights, batch, context, kv_bytes)
    n = archs.parameter_count(arch)
    q = WEIGHT_BYTES[weights]
    rows = [Term(f"weights ({weights})", f"n·{q}", n * q)]
    if q < 2:
        rows.append(Term("quantization scales (fp16 per 128)", "2·n/128", 2 * n / SCALE_GROUP))
    rows.append(Term(f"KV cache ({'bf16' if kv_bytes == 2 else f'{kv_bytes} B'})", "2·L·kv·d·S·B·c",
                     kv_cache_bytes(arch, batch, context, kv_bytes)))
    work = workspace_terms(arch, batch, context, weights, flash)
    rows.append(Term("largest layer's workspace", " + ".join(t.formula for t in work), sum(t.bytes for t in work)))
    return rows


def accelerate_estimate(arch, weights):
    """What ``accelerate estimate-memory`` prints for ``arch`` at ``weights`` (bytes): its
    ``AutoModel`` (no LM head) in fp32 divided by 2, 4 or 8, and its largest layer (the token
    table or one decoder block)."""
    arch = archs.get_arch(arch)
    head = 0 if arch.tied else arch.vocab * arch.hidden + (arch.vocab if arch.bias else 0)
    scale = WEIGHT_BYTES[weights] / 4
    base = archs.parameter_count(arch) - head
    largest = max(arch.vocab * arch.hidden, archs.layer_parameter_count(arch))
    return {"total": 4 * base * scale, "largest_layer": 4 * largest * scale}
