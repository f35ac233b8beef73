"""Decoder-only Transformer shapes for the closed-form planner: GPT-2/3, LLaMA, and tinymem's own.

An :class:`Arch` names what the memory formulas need: ``layers`` L, ``hidden`` h, ``heads`` a,
``seq`` s (the training sequence length), ``vocab`` V, ``ffn`` f (4h for GPT), and how the
layer is built: ``mlp`` ("gelu": Linear-GELU-Linear; "swiglu": down(silu(gate x) * up x)),
``norm`` ("layernorm": weight and bias; "rmsnorm": weight only), ``bias`` (the Linears have
biases), ``positions`` ("learned": an (s, h) table; "rotary": none to learn), ``tied`` (the output
head reuses the token table; else a Linear (V, h), with a bias when ``bias``), ``dropout`` (the
probability after each block's MLP; GPT trained with 0.1 in attention, MLP and residuals).

Parameter count of a GPT layer: 12h² + 13h (qkv 3h² + 3h, projection h² + h, MLP 8h² + 5h,
two LayerNorms 4h); with the embeddings and final norm, GPT-3 175B has 174.6·10⁹ parameters.
A LLaMA layer: 4h² + 3hf + 2h (no biases, SwiGLU's three matrices, two RMSNorm weights).

The published shapes (Brown et al. 2020, Table 2.1; Radford et al. 2019; Touvron et al. 2023):
GPT-3 13B is listed with h = 5140 and 40 heads of 128, which do not multiply out; we take
h = 5120 = 40·128.
"""
import functools
import math
from collections import namedtuple

from ..checks import is_int

Arch = namedtuple("Arch", "name layers hidden heads seq vocab ffn mlp norm bias positions tied dropout")
Arch.__new__.__defaults__ = (None, "gelu", "layernorm", True, "learned", False, 0.0)

GPT2_VOCAB = 50257

ARCHS = {
    "gpt2": Arch("gpt2", 12, 768, 12, 1024, GPT2_VOCAB, tied=True),
    "gpt2-xl": Arch("gpt2-xl", 48, 1600, 25, 1024, GPT2_VOCAB, tied=True),
    "gpt3-2.7b": Arch("gpt3-2.7b", 32, 2560, 32, 2048, GPT2_VOCAB, tied=True),
    "gpt3-6.7b": Arch("gpt3-6.7b", 32, 4096, 32, 2048, GPT2_VOCAB, tied=True),
    "gpt3-13b": Arch("gpt3-13b", 40, 5120, 40, 2048, GPT2_VOCAB, tied=True),
    "gpt3-175b": Arch("gpt3-175b", 96, 12288, 96, 2048, GPT2_VOCAB, tied=True),
    "llama-7b": Arch("llama-7b", 32, 4096, 32, 2048, 32000, ffn=11008, mlp="swiglu", norm="rmsnorm",
                     bias=False, positions="rotary"),
    "llama-13b": Arch("llama-13b", 40, 5120, 40, 2048, 32000, ffn=13824, mlp="swiglu", norm="rmsnorm",
                      bias=False, positions="rotary"),
    "llama-65b": Arch("llama-65b", 80, 8192, 64, 2048, 32000, ffn=22016, mlp="swiglu", norm="rmsnorm",
                      bias=False, positions="rotary"),
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


def is_gpt(arch):
    """True for the layer Korthikanti et al. count: GELU MLP, LayerNorm, biases, learned positions."""
    return arch.mlp == "gelu" and arch.norm == "layernorm" and arch.bias and arch.positions == "learned"


def layer_shapes(arch):
    """``[(name, shape)]`` of one block's parameters, in tinymem's naming."""
    h, f = arch.hidden, ffn(arch)
    norm = [("weight", (h,))] + ([("bias", (h,))] if arch.norm == "layernorm" else [])
    shapes = [(f"ln1.{n}", s) for n, s in norm]
    shapes.append(("attn.in_proj_weight", (3 * h, h)))
    if arch.bias:
        shapes.append(("attn.in_proj_bias", (3 * h,)))
    shapes.append(("attn.out_proj.weight", (h, h)))
    if arch.bias:
        shapes.append(("attn.out_proj.bias", (h,)))
    shapes += [(f"ln2.{n}", s) for n, s in norm]
    linears = ([("mlp.0", f, h), ("mlp.2", h, f)] if arch.mlp == "gelu"
               else [("mlp.gate", f, h), ("mlp.up", f, h), ("mlp.down", h, f)])
    for name, out, inp in linears:
        shapes.append((f"{name}.weight", (out, inp)))
        if arch.bias:
            shapes.append((f"{name}.bias", (out,)))
    return shapes


@functools.lru_cache(maxsize=64)
def parameter_shapes(arch):
    """``((name, shape), ...)`` of every parameter of the model, in tinymem's order."""
    h = arch.hidden
    shapes = [("tok_emb.weight", (arch.vocab, h))]
    if arch.positions == "learned":
        shapes.append(("pos_emb.weight", (arch.seq, h)))
    for i in range(arch.layers):
        shapes += [(f"blocks.{i}.{n}", s) for n, s in layer_shapes(arch)]
    shapes.append(("ln_f.weight", (h,)))
    if arch.norm == "layernorm":
        shapes.append(("ln_f.bias", (h,)))
    if not arch.tied:
        shapes.append(("head.weight", (arch.vocab, h)))
        if arch.bias:
            shapes.append(("head.bias", (arch.vocab,)))
    return tuple(shapes)


def parameter_count(arch):
    """Number of trainable values (a tied head counted once)."""
    return sum(math.prod(s) for _, s in parameter_shapes(arch))


def layer_parameter_count(arch):
    return sum(math.prod(s) for _, s in layer_shapes(arch))


def describe(arch):
    """One line: sizes and parameter count."""
    return (f"{arch.name}: {arch.layers} layers, h={arch.hidden}, {arch.heads} heads, s={arch.seq}, "
            f"V={arch.vocab}, f={ffn(arch)}, {arch.mlp}/{arch.norm}"
            f"{'' if arch.bias else ', no biases'}, {parameter_count(arch) / 1e9:.2f}B parameters")
