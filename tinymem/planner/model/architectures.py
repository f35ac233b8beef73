"""Decoder-only Transformer shapes for the closed-form planner: GPT-2/3, LLaMA, and tinymem's own.

An :class:`Arch` names what the memory formulas need: ``layers`` L, ``hidden`` h, ``heads`` a,
``seq`` s (the training sequence length), ``vocab`` V, ``ffn`` f (4h for GPT), and how the
layer is built: ``mlp`` ("gelu": Linear-GELU-Linear; "swiglu": down(silu(gate x) * up x)),
``norm`` ("layernorm": weight and bias; "rmsnorm": weight only), ``bias`` (the Linears have
biases), ``positions`` ("learned": an (s, h) table; "rotary": none to learn), ``tied`` (the output
head reuses the token table; else a Linear (V, h), with a bias when ``bias``), ``dropout`` (the
probability after each block's MLP; GPT trained with 0.1 in attention, MLP and residuals),
``kv_heads`` (grouped-query attention: k and v have kv_heads heads of width h/a; None: a) and
``experts`` E with ``top_k`` (a mixture of experts: E MLPs and a router (E, h) per layer, each
token through top_k of them; every expert's weights count, activations are top_k MLPs' worth).

Parameter count of a GPT layer: 12h² + 13h (qkv 3h² + 3h, projection h² + h, MLP 8h² + 5h,
two LayerNorms 4h); with the embeddings and final norm, GPT-3 175B has 174.6·10⁹ parameters.
A LLaMA layer: 4h² + 3hf + 2h (no biases, SwiGLU's three matrices, two RMSNorm weights); with
grouped-query attention 2h² + 2h·kv·(h/a) + 3hf + 2h; a Mixtral layer E·3hf + E·h in place of 3hf.

The published shapes (Brown et al. 2020, Table 2.1; Radford et al. 2019; Touvron et al. 2023a
and 2023b for LLaMA and LLaMA-2; Meta's LLaMA-3 model card; Jiang et al. 2024 for Mixtral), each
preset at its published context length:
GPT-3 13B is listed with h = 5140 and 40 heads of 128, which do not multiply out; we take
h = 5120 = 40·128.
"""
import functools
import math
from collections import namedtuple

from ...checks import is_int

Arch = namedtuple("Arch", "name layers hidden heads seq vocab ffn mlp norm bias positions tied dropout "
                         "kv_heads experts top_k")
Arch.__new__.__defaults__ = (None, "gelu", "layernorm", True, "learned", False, 0.0, None, 1, 1)
LLAMA = dict(mlp="swiglu", norm="rmsnorm", bias=False, positions="rotary")

GPT2_VOCAB = 50257

ARCHS = {
    "gpt2": Arch("gpt2", 12, 768, 12, 1024, GPT2_VOCAB, tied=True),
    "gpt2-xl": Arch("gpt2-xl", 48, 1600, 25, 1024, GPT2_VOCAB, tied=True),
    "gpt3-1.3b": Arch("gpt3-1.3b", 24, 2048, 16, 2048, GPT2_VOCAB, tied=True),
    "gpt3-2.7b": Arch("gpt3-2.7b", 32, 2560, 32, 2048, GPT2_VOCAB, tied=True),
    "gpt3-6.7b": Arch("gpt3-6.7b", 32, 4096, 32, 2048, GPT2_VOCAB, tied=True),
    "gpt3-13b": Arch("gpt3-13b", 40, 5120, 40, 2048, GPT2_VOCAB, tied=True),
    "gpt3-175b": Arch("gpt3-175b", 96, 12288, 96, 2048, GPT2_VOCAB, tied=True),
    "llama-7b": Arch("llama-7b", 32, 4096, 32, 2048, 32000, ffn=11008, **LLAMA),
    "llama-13b": Arch("llama-13b", 40, 5120, 40, 2048, 32000, ffn=13824, **LLAMA),
    "llama-65b": Arch("llama-65b", 80, 8192, 64, 2048, 32000, ffn=22016, **LLAMA),
    "llama2-7b": Arch("llama2-7b", 32, 4096, 32, 4096, 32000, ffn=11008, **LLAMA),
    "llama2-13b": Arch("llama2-13b", 40, 5120, 40, 4096, 32000, ffn=13824, **LLAMA),
    "llama2-70b": Arch("llama2-70b", 80, 8192, 64, 4096, 32000, ffn=28672, kv_heads=8, **LLAMA),
    "llama3-8b": Arch("llama3-8b", 32, 4096, 32, 8192, 128256, ffn=14336, kv_heads=8, **LLAMA),
    "llama3-70b": Arch("llama3-70b", 80, 8192, 64, 8192, 128256, ffn=28672, kv_heads=8, **LLAMA),
    "mixtral-8x7b": Arch("mixtral-8x7b", 32, 4096, 32, 32768, 32000, ffn=14336, kv_heads=8, experts=8, top_k=2,
                         **LLAMA),
}


def get_arch(name_or_arch):
    """An :class:`Arch` from a name in :data:`ARCHS` (or an Arch, returned as it is)."""
    if isinstance(name_or_arch, Arch):
        return check(name_or_arch)
    if not isinstance(name_or_arch, str) or name_or_arch not in ARCHS:
        raise ValueError(f"unknown architecture {name_or_arch!r}; choose one of {', '.join(ARCHS)} "
                         "or give explicit sizes (layers, hidden, heads, seq, vocab)")
    return check(ARCHS[name_or_arch])


def custom(layers, hidden, heads, seq, vocab, ffn=None, name="custom", **layout):
    """An :class:`Arch` from explicit sizes (GPT layout unless ``layout`` says otherwise)."""
    sizes = dict(layers=layers, hidden=hidden, heads=heads, seq=seq, vocab=vocab, ffn=ffn)
    for field, value in sizes.items():
        try:
            sizes[field] = None if value is None and field == "ffn" else int(value)
        except (TypeError, ValueError):
            raise ValueError(f"{name}: {field} must be a positive integer, got {value!r}") from None
    return check(Arch(name, **sizes, **layout))


def tinymem_lm(vocab, seq, hidden, heads, layers, dropout=0.0):
    """The shape of tinymem's own ``models.TransformerLM`` (context = seq): GPT layout with an
    untied head that has a bias."""
    return check(Arch("tinymem", layers, hidden, heads, seq, vocab, dropout=dropout))


def check(arch):
    for field in ("layers", "hidden", "heads", "seq", "vocab"):
        value = getattr(arch, field)
        if not is_int(value) or value < 1:
            raise ValueError(f"{arch.name}: {field} must be a positive integer, got {value!r}")
    if arch.ffn is not None and (not is_int(arch.ffn) or arch.ffn < 1):
        raise ValueError(f"{arch.name}: ffn must be a positive integer (or None for 4 x hidden), got {arch.ffn!r}")
    if arch.hidden % arch.heads:
        raise ValueError(f"{arch.name}: hidden size {arch.hidden} is not divisible by {arch.heads} heads")
    kv = kv_heads(arch)
    if not is_int(kv) or kv < 1 or arch.heads % kv:
        raise ValueError(f"{arch.name}: kv_heads must be a positive integer that divides the {arch.heads} "
                         f"heads (grouped-query attention), got {arch.kv_heads!r}")
    for field in ("experts", "top_k"):
        if not is_int(getattr(arch, field)) or getattr(arch, field) < 1:
            raise ValueError(f"{arch.name}: {field} must be a positive integer, got {getattr(arch, field)!r}")
    if arch.top_k > arch.experts:
        raise ValueError(f"{arch.name}: top_k ({arch.top_k}) cannot exceed the {arch.experts} experts")
    if arch.mlp not in ("gelu", "swiglu"):
        raise ValueError(f"{arch.name}: mlp must be 'gelu' or 'swiglu', got {arch.mlp!r}")
    if arch.norm not in ("layernorm", "rmsnorm"):
        raise ValueError(f"{arch.name}: norm must be 'layernorm' or 'rmsnorm', got {arch.norm!r}")
    if arch.positions not in ("learned", "rotary"):
        raise ValueError(f"{arch.name}: positions must be 'learned' or 'rotary', got {arch.positions!r}")
    return arch


def ffn(arch):
    """The MLP's inner width f (4h when the Arch does not say)."""
    return 4 * arch.hidden if arch.ffn is None else arch.ffn


def kv_heads(arch):
    """Heads of k and v (grouped-query attention); a, the query heads, when the Arch does not say."""
    return arch.heads if arch.kv_heads is None else arch.kv_heads


def is_gpt(arch):
    """True for the layer Korthikanti et al. count: GELU MLP, LayerNorm, biases, learned positions."""
    return arch.mlp == "gelu" and arch.norm == "layernorm" and arch.bias and arch.positions == "learned"


def layer_shapes(arch):
    """``[(name, shape)]`` of one block's parameters, in tinymem's naming (q, k and v in one
    projection of h + 2·kv·h/a rows; a mixture's experts as ``mlp.experts.E.*``)."""
    h, f = arch.hidden, ffn(arch)
    qkv = h + 2 * kv_heads(arch) * (h // arch.heads)
    norm = [("weight", (h,))] + ([("bias", (h,))] if arch.norm == "layernorm" else [])
    shapes = [(f"ln1.{n}", s) for n, s in norm]
    shapes.append(("attn.in_proj_weight", (qkv, h)))
    if arch.bias:
        shapes.append(("attn.in_proj_bias", (qkv,)))
    shapes.append(("attn.out_proj.weight", (h, h)))
    if arch.bias:
        shapes.append(("attn.out_proj.bias", (h,)))
    shapes += [(f"ln2.{n}", s) for n, s in norm]
    linears = ([("0", f, h), ("2", h, f)] if arch.mlp == "gelu"
               else [("gate", f, h), ("up", f, h), ("down", h, f)])
    prefixes = ["mlp"] if arch.experts == 1 else [f"mlp.experts.{e}" for e in range(arch.experts)]
    if arch.experts > 1:
        shapes.append(("mlp.router.weight", (arch.experts, h)))
    for prefix in prefixes:
        for name, out, inp in linears:
            shapes.append((f"{prefix}.{name}.weight", (out, inp)))
            if arch.bias:
                shapes.append((f"{prefix}.{name}.bias", (out,)))
    return shapes


def _outer_shapes(arch):
    """``(before, after)``: the parameters ahead of the blocks and after them."""
    h = arch.hidden
    before = [("tok_emb.weight", (arch.vocab, h))]
    if arch.positions == "learned":
        before.append(("pos_emb.weight", (arch.seq, h)))
    after = [("ln_f.weight", (h,))]
    if arch.norm == "layernorm":
        after.append(("ln_f.bias", (h,)))
    if not arch.tied:
        after.append(("head.weight", (arch.vocab, h)))
        if arch.bias:
            after.append(("head.bias", (arch.vocab,)))
    return before, after


def parameter_shapes(arch):
    """``((name, shape), ...)`` of every parameter of the model, in tinymem's order (L entries
    per layer: for names; the planner itself uses :func:`shape_counts`)."""
    before, after = _outer_shapes(arch)
    blocks = [(f"blocks.{i}.{n}", s) for i in range(arch.layers) for n, s in layer_shapes(arch)]
    return tuple(before + blocks + after)


@functools.lru_cache(maxsize=256)
def shape_counts(arch):
    """``{shape: how many parameters have it}``: the model in a few entries whatever its depth,
    so every closed-form sum costs the same at 10 or 10⁶ layers."""
    before, after = _outer_shapes(arch)
    counts = {}
    for shapes, times in ((before + after, 1), (layer_shapes(arch), arch.layers)):
        for _, shape in shapes:
            counts[shape] = counts.get(shape, 0) + times
    return counts


def parameter_count(arch):
    """Number of trainable values (a tied head counted once)."""
    return sum(math.prod(s) * c for s, c in shape_counts(arch).items())


def layer_parameter_count(arch):
    return sum(math.prod(s) for _, s in layer_shapes(arch))


def largest_module(arch):
    """Parameters of the largest module (its own weight and bias), as DeepSpeed's
    ``model_to_params`` in ``stage3.py`` finds its largest layer: the token table or the head for
    a LLaMA, a 4h x h MLP matrix for a small-vocabulary GPT."""
    modules = {}
    before, after = _outer_shapes(arch)
    for name, shape in before + after + layer_shapes(arch):
        owner = name.rsplit(".", 1)[0]
        modules[owner] = modules.get(owner, 0) + math.prod(shape)
    return max(modules.values())


def describe(arch):
    """One line: sizes and parameter count."""
    return (f"{arch.name}: {arch.layers} layers, h={arch.hidden}, {arch.heads} heads, s={arch.seq}, "
            f"V={arch.vocab}, f={ffn(arch)}, {arch.mlp}/{arch.norm}"
            f"{'' if arch.bias else ', no biases'}"
            f"{f', {kv_heads(arch)} kv heads' if kv_heads(arch) != arch.heads else ''}"
            f"{f', {arch.experts} experts (top {arch.top_k})' if arch.experts > 1 else ''}"
            f", {parameter_count(arch) / 1e9:.2f}B parameters")
