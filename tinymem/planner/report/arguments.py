"""``tinymem plan``'s flags: one group per mode, and the door that refuses a flag the mode ignores.

``plan`` runs in one of four modes, chosen by the flags:

    probe       --model/--sizes/--batch: measures a tinymem model's step on this machine
    training    --arch NAME or --config FILE (or --layers/--hidden/--heads/--seq/--vocab): the closed
                form's stacks
    layout      training flags + --tensor-parallel/--pipeline/--data-parallel/--sequence-parallel
    inference   --arch NAME --inference
    torch       --arch NAME --mode torch [--torch WORDS]: one PyTorch step's peak (the torch mode)

A flag of another mode used to be ignored, the output byte-identical (``--inference
--tensor-parallel 8`` still said a 70B model does not fit one GPU); :func:`check` refuses it
in one line. Flags default to None so that "given" can be told from "left at its default";
:data:`DEFAULTS` fills them in after the check.
"""
import argparse
import re

from ...memory import parse_bytes
from ..model import architectures
from .. import conventions
from ..terms import inference

ARCH_FLAGS = ("arch", "config", "layers", "hidden", "heads", "seq", "vocab", "ffn")
OVERRIDES = ("layers", "hidden", "heads", "vocab", "ffn")  # with --arch or --config: in place of the model's
LAYOUT_FLAGS = ("tensor_parallel", "pipeline", "data_parallel", "sequence_parallel")
COMMON = ("batch", "gpu_memory", "cuda_context", "fragmentation", "json")
MODES = {
    "probe": ("model", "sizes", "batch", "budget", "schedules", "precisions", "optimizers", "offloads", "top", "all",
              "verify", "json"),
    "training": ARCH_FLAGS + COMMON + ("gpus", "micro_batches", "mode", "convention", "explain", "finetune",
                                       "lora_rank", "verify_torch"),
    "layout": ARCH_FLAGS + COMMON + LAYOUT_FLAGS + ("micro_batches", "mode", "convention", "explain", "recompute",
                                                    "zero"),
    "inference": ARCH_FLAGS + COMMON + ("inference", "context", "weights", "kv_cache"),
    "torch": ARCH_FLAGS + COMMON + ("mode", "torch", "verify_torch"),
}
DEFAULTS = {"gpus": 8, "gpu_memory": "80GB", "mode": "tinymem", "convention": "tinymem", "cuda_context": "0.5GB",
            "fragmentation": 0.05, "lora_rank": 16, "weights": "bf16", "kv_cache": "bf16", "recompute": "selective",
            "zero": 1, "top": 15}
USAGE = {"probe": "--model/--sizes/--batch (probe a tinymem model)",
         "training": "--arch or --config (the closed form)",
         "layout": "--tensor-parallel/--pipeline/--data-parallel (one 3D layout)", "inference": "--inference",
         "torch": "--mode torch (one PyTorch step)"}

EPILOG = """examples:
  tinymem plan --arch llama2-7b --gpus 8 --gpu-memory 80GB     which stacks fit, the fewest GPUs each needs
  tinymem plan --arch llama2-70b --gpus 64 --explain           the proposal term by term
  tinymem plan --arch llama2-7b --gpus 1 --gpu-memory 24GB --finetune   LoRA and QLoRA on one GPU too
  tinymem plan --arch llama2-70b --tensor-parallel 8 --pipeline 4 --data-parallel 2   one 3D layout
  tinymem plan --arch llama3-8b --inference --context 32768    weights, KV cache, workspace of generation
  tinymem plan --config config.json --gpus 1 --json            a Hugging Face or nanoGPT config; bytes as JSON
  tinymem plan --arch gpt2 --layers 2 --hidden 256 --heads 4 --seq 128 --verify-torch foreach   torch mode vs PyTorch
  tinymem plan --model mlp --sizes 64,256,256,10 --batch 32 --budget 4MB   probe a tinymem model here

exit codes:
  0  something fits: a stack (with --finetune, or LoRA/QLoRA), the layout, the inference
  1  nothing fits the memory given
  2  bad arguments (one line on standard error says which)"""


class SizeFormatter(argparse.RawDescriptionHelpFormatter):
    """The epilog's examples keep their lines."""


def add_arguments(parser):
    """Every flag of ``plan``, one argument group per mode (sizes such as ``-5GB`` are read as
    values, not as flags, so that their error is the planner's one line)."""
    parser._negative_number_matcher = re.compile(r"^-\d*\.?\d+([A-Za-z]+)?$")
    probe = parser.add_argument_group("probe a tinymem model on this machine (--model, --sizes, --batch)")
    probe.add_argument("--model", help="mlp, unet or transformer")
    probe.add_argument("--sizes", help="mlp: in,hidden,...,out; unet: in_ch,classes,base,depth,res; "
                       "transformer: vocab,context,d_model,heads,layers")
    probe.add_argument("--budget", default=None, help="device budget, e.g. 64MB (default: none)")
    probe.add_argument("--schedules", nargs="+", metavar="S", help="restrict: none sqrt block")
    probe.add_argument("--precisions", nargs="+", metavar="P", help="restrict: fp32 fp16 bf16")
    probe.add_argument("--optimizers", nargs="+", metavar="NAME", help="restrict: SGD 'SGD momentum' Adam Adafactor Adam8bit")
    probe.add_argument("--offloads", nargs="+", metavar="O", help="restrict: none activations optimizer")
    probe.add_argument("--top", type=int, default=None, help=f"rows to print (default {DEFAULTS['top']})")
    probe.add_argument("--all", action="store_true", help="print every combination")
    probe.add_argument("--verify", action="store_true", help="run one step with the proposal and compare")
    model = parser.add_argument_group("the model of the closed form (--arch NAME, --config FILE, or all of --layers "
                                      "... --vocab; with --arch or --config, each size given overrides the model's)")
    model.add_argument("--arch", help="a named model: " + ", ".join(architectures.ARCHS))
    model.add_argument("--config", metavar="FILE", help="a model's config.json: Hugging Face's gpt2 family (n_layer, "
                       "n_embd, n_head, n_positions or n_ctx, vocab_size, n_inner, tie_word_embeddings, "
                       "activation_function, *_pdrop), its llama family (num_hidden_layers, hidden_size, "
                       "num_attention_heads, num_key_value_heads, intermediate_size, max_position_embeddings, "
                       "vocab_size, tie_word_embeddings, hidden_act), or nanoGPT's GPTConfig as JSON (block_size, "
                       "vocab_size, n_layer, n_head, n_embd, dropout, bias). Fields that change no memory of a step "
                       "(token ids, initializer_range, norm epsilons, rope_theta/rope_scaling, torch_dtype, "
                       "transformers_version, use_cache, summary_*, any _private field) are ignored with a note; "
                       "any other unknown field is refused by name, as is a missing or impossible one")
    for name in ("layers", "hidden", "heads", "seq", "vocab", "ffn"):
        model.add_argument(f"--{name}", type=int, default=None, help=f"explicit {name}" +
                           (" (with --arch: its sequence length)" if name == "seq" else
                            " (with --arch: in place of the named model's)"))
    machine = parser.add_argument_group("the machine and the batch (every closed-form mode)")
    machine.add_argument("--batch", type=int, default=None,
                         help="sequences per micro-batch per GPU (default 1); probe: samples per step")
    machine.add_argument("--gpu-memory", default=None, metavar="BYTES",
                         help=f"memory per GPU, with its unit: 80GB, 24GiB (default {DEFAULTS['gpu_memory']})")
    machine.add_argument("--cuda-context", default=None, metavar="BYTES", help="memory a GPU process holds before "
                         f"any tensor (default {DEFAULTS['cuda_context']})")
    machine.add_argument("--fragmentation", type=float, default=None, metavar="FRACTION", help="allowance for the "
                         f"allocator's fragmentation, a fraction of the peak (default {DEFAULTS['fragmentation']})")
    train = parser.add_argument_group("training (the closed form's stacks, or one layout)")
    train.add_argument("--gpus", type=int, default=None, help=f"GPUs (default {DEFAULTS['gpus']}); not with a layout")
    train.add_argument("--micro-batches", type=int, default=None,
                       help="micro-batches per step on a pipeline (default 4 per stage)")
    train.add_argument("--mode", default=None, choices=("tinymem", "korthikanti", "torch"),
                       help="count tinymem's saved tensors (default), or Korthikanti et al.'s; torch: the peak of "
                       "one PyTorch 2.13 step of a GPT or LLaMA, op by op")
    train.add_argument("--torch", default=None, metavar="WORDS", help="--mode torch's options, comma-separated: "
                       "for-loop|foreach|fused, math|sdpa, hold-logits|no-hold-logits, checkpoint, cpu|cuda")
    train.add_argument("--convention", default=None, choices=conventions.CONVENTIONS,
                       help="count model states as tinymem holds them (default), as DeepSpeed's estimators do "
                       f"({conventions.DEEPSPEED}), or as the ZeRO paper does")
    train.add_argument("--explain", action="store_true",
                       help="the proposal term by term (bytes per parameter, divided by, GB per GPU)")
    train.add_argument("--verify-torch", nargs="?", const="", default=None, metavar="WORDS",
                       help="build the model in PyTorch on this CPU at the size given (small: the step must peak "
                       "under 2 GB), run two AdamW steps, and print the torch mode's prediction beside the measured "
                       "second step, per bucket. WORDS (optional, comma separated): for-loop, foreach or fused "
                       "(AdamW; default for-loop, the CPU's), math or sdpa, no-hold-logits")
    train.add_argument("--finetune", action="store_true",
                       help="also LoRA and QLoRA on one GPU (frozen base, fp32 adapters with Adam)")
    train.add_argument("--lora-rank", type=int, default=None,
                       help=f"rank of the --finetune adapters (default {DEFAULTS['lora_rank']})")
    layout = parser.add_argument_group("one 3D layout (t x p x d GPUs, bf16, Megatron's way)")
    layout.add_argument("--tensor-parallel", type=int, default=None, metavar="T", help="tensor-parallel ranks")
    layout.add_argument("--pipeline", type=int, default=None, metavar="P", help="pipeline stages (1F1B)")
    layout.add_argument("--data-parallel", type=int, default=None, metavar="D", help="data-parallel copies")
    layout.add_argument("--sequence-parallel", action="store_true", help="split the rest of the activations too")
    layout.add_argument("--recompute", default=None, choices=("none", "selective", "full"),
                        help=f"recomputation of the layout (default {DEFAULTS['recompute']})")
    layout.add_argument("--zero", type=int, default=None, choices=(0, 1, 2, 3),
                        help=f"ZeRO stage over the data-parallel copies (default {DEFAULTS['zero']}, Megatron's "
                        "distributed optimizer)")
    parser.add_argument("--json", action="store_true", help="print the plan as JSON for scripts, every row and "
                        "bucket in bytes (every mode; the exit code is the table's)")
    infer = parser.add_argument_group("inference (--arch NAME --inference), on one GPU")
    infer.add_argument("--inference", action="store_true", help="weights, KV cache and workspace of generation")
    infer.add_argument("--context", type=int, default=None, help="tokens of context per sequence (default: the arch's)")
    infer.add_argument("--weights", default=None, choices=tuple(inference.WEIGHT_BYTES),
                       help=f"storage of the weights (default {DEFAULTS['weights']})")
    infer.add_argument("--kv-cache", default=None, choices=("bf16", "int8"),
                       help=f"storage of the KV cache (default {DEFAULTS['kv_cache']})")


def mode_of(args):
    """Which of :data:`MODES` the flags ask for."""
    if args.inference:
        return "inference"
    if args.mode == "torch":
        return "torch"
    closed_form = any(getattr(args, n) is not None for n in ARCH_FLAGS)
    if not closed_form and (args.model, args.sizes) != (None, None):
        return "probe"  # a stray layout flag is the one refused, not --model
    if any(getattr(args, n) not in (None, False) for n in LAYOUT_FLAGS):
        return "layout"
    return "training" if closed_form else "probe"


def flag(name):
    return "--" + name.replace("_", "-")


def check(args):
    """``args``'s mode, after refusing (ValueError, one line) each flag the mode would ignore and
    each value that cannot be right; then fills in :data:`DEFAULTS`."""
    mode = mode_of(args)
    allowed = set(MODES[mode])
    for name in sorted({n for names in MODES.values() for n in names} - allowed):
        if getattr(args, name, None) not in (None, False):
            where = [m for m, names in MODES.items() if name in names]
            hint = (" (tensor-parallel inference is not modelled: the plan is one GPU's)"
                    if mode == "inference" and name in LAYOUT_FLAGS else "")
            raise ValueError(f"{flag(name)} applies to {' or '.join(USAGE[m] for m in where)}, not to "
                             f"{USAGE[mode]}: leave it out{hint}")
    if mode == "probe" and args.budget is not None:
        size_or_none("--budget", args.budget)
    if args.arch and args.config:
        raise ValueError("--arch and --config both name the model: give one")
    if args.lora_rank is not None and not args.finetune:
        raise ValueError("--lora-rank sets the rank of --finetune's adapters: give --finetune with it")
    if args.sequence_parallel and (args.tensor_parallel or 1) == 1:
        raise ValueError("--sequence-parallel splits activations over the tensor-parallel ranks: give "
                         "--tensor-parallel T (T > 1) with it")
    for name in ("gpus", "lora_rank", "tensor_parallel", "pipeline", "data_parallel", "context", "top", "batch",
                 "micro_batches"):
        value = getattr(args, name, None)
        if value is not None and value < 1:
            raise ValueError(f"{flag(name)} must be a whole number >= 1, got {value}")
    for name, value in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if mode != "probe":
        size("--gpu-memory", args.gpu_memory, least=1)
        size("--cuda-context", args.cuda_context)
    return mode


def size_or_none(name, text):
    """Bytes of ``text``, refused in one line that names the flag (a probe's budget may be a bare
    number of bytes: a tinymem model's step can take a few hundred)."""
    try:
        return parse_bytes(text)
    except ValueError:
        raise ValueError(f"{name}: cannot read {text!r} as a size; write bytes >= 0, e.g. 4096, 64MB or 1.5GiB") \
            from None


def size(name, text, least=0):
    """Bytes of ``text`` (``80GB``, ``24GiB``); a bare number below a megabyte is refused as a
    likely missing unit (``--gpu-memory 80`` read as 80 bytes said nothing fits)."""
    try:
        value = parse_bytes(text)
    except ValueError:
        raise ValueError(f"{name}: cannot read {text!r} as a size; write a number with its unit, e.g. 80GB or "
                         "24GiB") from None
    if re.fullmatch(r"\s*[\d.]+([eE][+-]?\d+)?\s*", str(text)) and 0 < float(text) < 1e6:  # 1e5 too
        raise ValueError(f"{name} {text} is {value} bytes: did you mean {text}GB?")
    if value < least:
        raise ValueError(f"{name} must be more than 0 bytes, got {text!r}")
    return value
