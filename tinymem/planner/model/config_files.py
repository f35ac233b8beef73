"""A model's ``config.json`` as the planner's :class:`~.architectures.Arch`.

Three families, told apart by ``model_type`` (or the first of ``architectures``), else by
nanoGPT's ``block_size``:

    family   fields read                                            the Arch
    gpt2     n_layer, n_embd, n_head, n_positions (or n_ctx),       GELU MLP, LayerNorm, biases,
             vocab_size, n_inner (null: 4h), tie_word_embeddings    learned positions
             (true), activation_function (a GELU), resid_pdrop,
             embd_pdrop, attn_pdrop (one probability; 0.1)
    llama    num_hidden_layers, hidden_size, num_attention_heads,   SwiGLU, RMSNorm, no biases,
             num_key_value_heads (the heads), intermediate_size,    rotary positions
             max_position_embeddings, vocab_size,
             tie_word_embeddings (false), hidden_act (silu)
    nanogpt  block_size, vocab_size, n_layer, n_head, n_embd,       GELU MLP, LayerNorm, tied head
             dropout (0.0), bias (true): GPTConfig as JSON

A value in parentheses is the default the family's own code takes when the field is absent;
every other field read is required. The sequence length is the context the file gives
(n_positions, max_position_embeddings, block_size).

Every field not read is one of three kinds. :data:`IGNORED` fields change nothing a training
step holds (token ids, initialization, norm epsilons, rotary frequencies, the dtype the weights
were saved in, library versions, generation and fine-tuning heads; and any field whose name
starts with ``_``): they are reported in a note. :data:`MUST_BE` fields are read only to check
that they hold the value of the layer the planner counts (``attention_bias: false``, ``head_dim``
= hidden/heads, ...). Any other field is refused by name: it may change the model, and a plan
that skipped it would be wrong without a word.
"""
import json
import os
from collections import namedtuple

from ...checks import is_int
from . import architectures

GELUS = ("gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_python", "gelu_accurate")
IGNORED = frozenset((
    "bos_token_id", "eos_token_id", "pad_token_id", "sep_token_id", "decoder_start_token_id",
    "initializer_range", "initializer_factor", "layer_norm_epsilon", "rms_norm_eps", "rope_theta", "rope_scaling",
    "torch_dtype", "dtype", "transformers_version", "architectures", "model_type", "use_cache", "pretraining_tp",
    "tokenizer_class", "id2label", "label2id", "task_specific_params", "summary_type", "summary_use_proj",
    "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "scale_attn_weights",
    "scale_attn_by_inverse_layer_idx", "n_ctx", "return_dict", "output_hidden_states", "output_attentions",
    "predict_special_tokens"))
MUST_BE = {"add_cross_attention": False, "is_encoder_decoder": False, "reorder_and_upcast_attn": False,
           "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
           "n_special": 0}  # OpenAI GPT's extra token rows, left at 0 in the published gpt2-medium/large/xl files
ARCHITECTURES = {"GPT2LMHeadModel": "gpt2", "GPT2Model": "gpt2", "LlamaForCausalLM": "llama", "LlamaModel": "llama"}
FAMILIES = ("gpt2", "llama", "nanogpt")
MISSING = object()

Config = namedtuple("Config", "arch family ignored defaults")
Config.__doc__ = """A file read: its :class:`~.architectures.Arch`, its ``family`` (one of
:data:`FAMILIES`), the fields ``ignored`` (sorted), and ``defaults``: ``{field: value}`` taken
for the fields the file left out."""


def read(path):
    """The :class:`Config` of the JSON file at ``path``; a ValueError that names the file and the
    field for a file that cannot be read, a missing or unknown field, or an impossible shape.
    Reads the file once; holds nothing."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        config = json.loads(text, object_pairs_hook=_once)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg}, line {exc.lineno} column {exc.colno})") from None
    except _Twice as exc:  # json.loads keeps the last silently: which one the author meant is unknown
        raise ValueError(f"{path}: it gives the field {exc} twice: keep the one meant") from None
    return parse(config, str(path))


class _Twice(Exception):
    """A JSON object that names one field twice (its name is the message)."""


def _once(pairs):
    """The object of ``pairs``; :class:`_Twice` for a name given twice."""
    config = {}
    for name, value in pairs:
        if name in config:
            raise _Twice(name)
        config[name] = value
    return config


def parse(config, source="config"):
    """:func:`read` on a dict already loaded; ``source`` starts every refusal and names the Arch."""
    if not isinstance(config, dict):
        raise ValueError(f"{source}: a config is a JSON object of fields, got a {type(config).__name__}")
    fields = _Fields(config, source)
    kind = family(config, source)
    arch = {"gpt2": _gpt2, "llama": _llama, "nanogpt": _nanogpt}[kind](fields, f"{os.path.basename(source)} ({kind})")
    for name, value in MUST_BE.items():
        if name in config and config[name] != value:
            raise ValueError(f"{source}: {name} is {config[name]!r}; the planner counts {kind}'s layer with {value!r}")
    unread = set(config) - fields.read - set(MUST_BE)
    ignored = sorted(n for n in unread if n in IGNORED or n.startswith("_"))
    unknown = sorted(unread - set(ignored))
    if unknown:
        raise ValueError(f"{source}: unknown field{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}: the planner "
                         f"does not know whether {'they change' if len(unknown) > 1 else 'it changes'} the model's "
                         "memory; remove it from the file if it does not (tinymem plan --help lists the fields read "
                         "and ignored)")
    return Config(architectures.check(arch), kind, ignored, fields.defaults)


def family(config, source="config"):
    """One of :data:`FAMILIES`: ``model_type``, else the first of ``architectures``, else nanoGPT
    when ``block_size`` is there."""
    kind = config.get("model_type")
    if kind is None and isinstance(config.get("architectures"), list) and config["architectures"]:
        first = config["architectures"][0]
        if not isinstance(first, str):
            raise ValueError(f"{source}: architectures[0] must be a class name such as 'GPT2LMHeadModel', "
                             f"got {first!r}")
        kind = ARCHITECTURES.get(first, first)
    if kind is None and "block_size" in config:
        return "nanogpt"
    if kind in ("gpt2", "llama"):
        return kind
    if kind is None:
        raise ValueError(f"{source}: no model_type field, and no block_size (nanoGPT's GPTConfig): give model_type "
                         "'gpt2' or 'llama'")
    raise ValueError(f"{source}: model_type {kind!r} is not read; the planner reads the gpt2 and llama families "
                     "and nanoGPT's GPTConfig")


class _Fields:
    """The config's fields, each read through here so that the unread ones are known."""

    def __init__(self, config, source):
        self.config, self.source, self.read, self.defaults = config, source, set(), {}

    def get(self, name, default=MISSING):
        self.read.add(name)
        if name in self.config:
            return self.config[name]
        if default is MISSING:
            raise ValueError(f"{self.source}: missing field {name}")
        if default is not None:  # None: the family derives it (n_inner: 4h)
            self.defaults[name] = default
        return default

    def size(self, name, default=MISSING):
        value = self.get(name, default)
        if value is None and default is not MISSING:  # null is the family's default, as its code reads it
            value = default
        if (value is not None or default is MISSING) and (not is_int(value) or value < 1):
            raise ValueError(f"{self.source}: {name} must be a positive integer, got {value!r}")
        return value

    def probability(self, name, default):
        value = self.get(name, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
            raise ValueError(f"{self.source}: {name} must be a probability in [0, 1), got {value!r}")
        return float(value)

    def flag(self, name, default):
        value = self.get(name, default)
        if not isinstance(value, bool):
            raise ValueError(f"{self.source}: {name} must be true or false, got {value!r}")
        return value

    def divides(self, hidden, heads):
        if self.config[hidden] % self.config[heads]:
            raise ValueError(f"{self.source}: {hidden} {self.config[hidden]} is not divisible by {heads} "
                             f"{self.config[heads]}")


def _gpt2(f, name):
    layers, hidden, heads, vocab = (f.size(n) for n in ("n_layer", "n_embd", "n_head", "vocab_size"))
    f.divides("n_embd", "n_head")
    seq = f.size("n_positions" if "n_positions" in f.config or "n_ctx" not in f.config else "n_ctx")
    activation = f.get("activation_function", "gelu_new")
    if activation not in GELUS:
        raise ValueError(f"{f.source}: activation_function {activation!r} is not a GELU; the planner's GPT-2 layer "
                         f"is one of {', '.join(GELUS)}")
    drops = {n: f.probability(n, 0.1) for n in ("resid_pdrop", "embd_pdrop", "attn_pdrop")}
    if len(set(drops.values())) > 1:
        raise ValueError(f"{f.source}: resid_pdrop, embd_pdrop and attn_pdrop differ ({drops}); the planner takes one "
                         "dropout probability: make them equal")
    return architectures.Arch(name, layers, hidden, heads, seq, vocab, f.size("n_inner", None),
                              tied=f.flag("tie_word_embeddings", True), dropout=drops["resid_pdrop"])


def _llama(f, name):
    layers, hidden, heads, ffn, seq, vocab = (f.size(n) for n in (
        "num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "max_position_embeddings",
        "vocab_size"))
    f.divides("hidden_size", "num_attention_heads")
    kv = f.size("num_key_value_heads", heads)
    if heads % kv:
        raise ValueError(f"{f.source}: num_key_value_heads {kv} does not divide num_attention_heads {heads}")
    if f.get("head_dim", None) not in (None, hidden // heads):
        raise ValueError(f"{f.source}: head_dim {f.config['head_dim']!r} is not hidden_size / num_attention_heads "
                         f"= {hidden // heads}; the planner's heads are hidden/heads wide")
    if f.get("hidden_act", "silu") != "silu":
        raise ValueError(f"{f.source}: hidden_act {f.config['hidden_act']!r}: the planner's LLaMA MLP is SwiGLU (silu)")
    return architectures.Arch(name, layers, hidden, heads, seq, vocab, ffn, tied=f.flag("tie_word_embeddings", False),
                              kv_heads=None if kv == heads else kv, **architectures.LLAMA)


def _nanogpt(f, name):
    layers, hidden, heads, seq, vocab = (f.size(n) for n in ("n_layer", "n_embd", "n_head", "block_size",
                                                              "vocab_size"))
    f.divides("n_embd", "n_head")
    return architectures.Arch(name, layers, hidden, heads, seq, vocab, tied=True, bias=f.flag("bias", True),
                              dropout=f.probability("dropout", 0.0))
