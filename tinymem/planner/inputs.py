"""The door of the closed form: a plan's inputs, refused or resolved once.

A :class:`Stack` names one way to train in the words a person writes ("bf16", "adam",
"zero-offload"); a :class:`Device` says how the machine computes. Each word becomes its value
here, once: :func:`width` (a precision's :class:`~.terms.precision.Width`), :func:`optimizer_label`
and :func:`offload_kind`. :func:`resolve` checks every
field of a stack (and of the stack on a model, and the batch) in one place, where each refusal
of a stack is raised, and returns a :class:`Resolved`: the stack's fields, plus the precision's
:class:`~.terms.precision.Width`, the optimizer's ``optim.table`` label, the offload kind, the
device, and the two widths the terms read from them (bytes an op computes in, how saved tensors
are stored). The functions below the door (:mod:`.terms.analytic`, :mod:`.terms.moments`,
:mod:`.terms.sharding`'s placement, :mod:`.conventions`, :mod:`.search.fits`,
:mod:`.measured.exactness`) read those values and never look a name up again.
"""
from collections import namedtuple

from .. import backend as tm_backend
from ..checks import positive_int
from ..optim.table import CONFIGS
from .model import architectures as archs
from .terms.activations import ATTENTIONS, STORAGES
from .terms.precision import PRECISIONS, WIDTHS, Width

Stack = namedtuple("Stack", "precision optimizer recompute attention storage zero ranks pipeline "
                            "schedule micro_batches offload tensor sequence_parallel")
Stack.__new__.__defaults__ = ("fp32", "Adam", "none", "plain", None, 0, 1, 1, "1f1b", 1, False, 1, False)
Stack.__doc__ = """One way to train: ``precision`` fp32 | fp16 | bf16 (half weights, gradients and
saved tensors, fp32 masters) | bf16-pure (no masters; :mod:`.terms.precision`); ``optimizer`` a label of
``optim.table.CONFIGS``; ``recompute`` none | selective | full | sqrt; ``attention`` plain | chunked;
``storage`` of saved tensors (None: the precision's; int8); ``zero`` stage 0-3 over ``ranks``
data-parallel ranks; ``pipeline`` stages with ``schedule`` gpipe | 1f1b; ``micro_batches`` per step
(accumulated, or fed to the pipeline); ``offload``: False, "optimizer" (True: tinymem's
``offload_optimizer``, the state and masters on the host), "zero-offload" (the gradients stream
there too) or "zero-offload-params" (ZeRO-3 only: the half weights wait there as well); ``tensor`` t
tensor-parallel ranks (Megatron: each layer's matrices split t ways) with ``sequence_parallel``
(the norms' and dropouts' activations split too). A GPU holds 1/(t·p) of the model; ``ranks``
data-parallel copies of that make ranks·t·p GPUs in all."""

Device = namedtuple("Device", "compute chunks fused_update")
Device.__doc__ = """How a device computes a step: ``compute`` "gpu" (in the precision's dtype) or
"numpy" (in float32: checkpointed inputs are 4 bytes a value, a half layer upcasts its weights);
``chunks``, the backend whose chunk size 8-bit Adam's chunked loops take ("numpy" or "gpu");
``fused_update``: tinymem's own step on CuPy, Adam's update in one fused kernel."""
GPU = Device("gpu", "gpu", False)  # the LLM-scale plans: a GPU, PyTorch's unfused update
THIS_MACHINE = "this machine"  # resolve(on=...): the default device, as the precision computes there
BACKENDS = ("gpu", "numpy")  # a Device's compute and chunks
NO_BATCH = object()  # resolve(batch=...) not given: None is a batch left out by mistake, refused

SCHEDULES = ("none", "selective", "full", "sqrt")


Resolved = namedtuple("Resolved", Stack._fields + ("width", "label", "kind", "device", "compute", "saved"))
Resolved.__doc__ = """A :class:`Stack` past the door: its fields (``Stack._make(r[:len(Stack._fields)])``
is the Stack again), ``width`` (the precision's Width), ``label`` (the optimizer's ``optim.table``
label), ``kind`` (the offload: None, "optimizer", "zero-offload" or "zero-offload-params"),
``device`` (a :class:`Device`), ``compute`` (bytes per value an op computes in) and ``saved`` (how
saved tensors are stored: int8, or the precision's). Plain fields: reading one runs no code."""


def device(backend="gpu", chunks=None, fused_update=False):
    """The :class:`Device` of a breakdown's ``backend``/``chunks``/``fused_update`` arguments
    (``chunks``: ``backend``'s by default), checked: "cpu" computed as a GPU does, silently."""
    return check_device(Device(backend, backend if chunks is None else chunks, fused_update))


def check_device(on):
    """``on`` when it is a :class:`Device` whose compute and chunks are one of :data:`BACKENDS`
    and whose ``fused_update`` is a bool, else a ValueError saying which field."""
    if not isinstance(on, Device):
        raise TypeError(f"a device is a planner.inputs.Device (e.g. Device('gpu', 'gpu', False)) or "
                        f"THIS_MACHINE, got {on!r}")
    for field in ("compute", "chunks"):
        if getattr(on, field) not in BACKENDS:
            raise ValueError(f"a device's {field} (breakdown's backend/chunks) is one of {', '.join(BACKENDS)}, "
                             f"got {getattr(on, field)!r}")
    if not isinstance(on.fused_update, bool):
        raise ValueError(f"fused_update is True or False, got {on.fused_update!r}")
    return on


def this_machine(precision_name):
    """The device :func:`tinymem.planner.measured.exactness.measure` runs on (the default one):
    NumPy computes half precision in float32; CuPy computes fp16 in float16 but bf16 in float32,
    as NumPy does (neither has a bfloat16 dtype: tinymem keeps bf16 as uint16 bits and decodes
    them to compute); CuPy's chunks are the GPU's and its optimizer update is fused."""
    on_cpu = tm_backend.default_device() == "cpu"
    return Device("numpy" if on_cpu or precision_name == "bf16" else "gpu", "numpy" if on_cpu else "gpu", not on_cpu)


def resolve(stack, arch=None, batch=NO_BATCH, on=GPU):
    """``stack`` checked and resolved on the device ``on`` (a :class:`Device`, or
    :data:`THIS_MACHINE`: :func:`this_machine`): a :class:`Resolved`. ``batch`` (the
    sequences per data-parallel rank) must be a whole number >= 1; with ``arch`` (an Arch, resolved
    already) the stack is checked on that model too: its pipeline stages against the layers, its
    tensor-parallel ranks against the heads."""
    if isinstance(stack, Resolved):
        raise TypeError("stack is resolved already: give the entry its Stack (Stack._make(resolved[:len(Stack._fields)])), "
                        "or call the function below the door with the resolved value")
    if not isinstance(stack, Stack):
        raise TypeError(f"stack must be a planner.analytic.Stack (e.g. Stack(precision='bf16', zero=2)), "
                        f"got a {type(stack).__name__}")
    wd, kind, label = width(stack.precision), offload_kind(stack.offload), optimizer_label(stack.optimizer)
    if stack.recompute not in SCHEDULES:
        raise ValueError(f"unknown recompute {stack.recompute!r}; choose one of {', '.join(SCHEDULES)}")
    if stack.schedule not in ("gpipe", "1f1b"):
        raise ValueError(f"unknown pipeline schedule {stack.schedule!r}; choose gpipe or 1f1b")
    if stack.attention not in ATTENTIONS:
        raise ValueError(f"unknown attention {stack.attention!r}; choose one of {', '.join(ATTENTIONS)}")
    if stack.storage is not None and stack.storage not in STORAGES:  # "int4" was built as the precision's
        raise ValueError(f"unknown storage {stack.storage!r}; choose None (the precision's) or one of "
                         f"{', '.join(STORAGES)}")
    for field in ("pipeline", "ranks", "micro_batches", "tensor"):  # 2.5 ranks gave a number
        positive_int(f"Stack.{field}", getattr(stack, field))
    if stack.sequence_parallel and stack.tensor == 1:
        raise ValueError("sequence parallelism splits activations over the tensor-parallel ranks: "
                         "give Stack.tensor > 1 with it")
    if batch is not NO_BATCH:
        positive_int("batch", batch)
    if arch is not None:
        if stack.pipeline > arch.layers:
            raise ValueError(f"{stack.pipeline} pipeline stages for {arch.layers} layers: "
                             "each stage needs at least one")
        kv = archs.kv_heads(arch)
        if arch.heads % stack.tensor or (kv % stack.tensor and stack.tensor % kv):
            raise ValueError(f"{stack.tensor} tensor-parallel ranks do not split {arch.name}'s {arch.heads} heads "
                             f"({kv} kv heads) evenly")
    if isinstance(stack.zero, bool) or stack.zero not in (0, 1, 2, 3):  # True was stage 1
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {stack.zero!r}")
    if kind == "zero-offload-params" and stack.zero != 3:
        raise ValueError(f"offloading the parameters is ZeRO-3's offload_param: stage 3, got stage {stack.zero}")
    on = this_machine(stack.precision) if on == THIS_MACHINE else check_device(on)
    compute = 4 if on.compute == "numpy" else wd.compute
    return Resolved(*stack, wd, label, kind, on, compute, wd.storage if stack.storage is None else stack.storage)


def width(precision):
    """The :class:`Width` of ``precision`` (a name of :data:`WIDTHS`, or a Width returned as it is)."""
    if isinstance(precision, Width):
        return precision
    if not isinstance(precision, str) or precision not in WIDTHS:  # a list raised "unhashable type"
        raise ValueError(f"unknown precision {precision!r}; choose one of {', '.join(PRECISIONS)}")
    return WIDTHS[precision]


def optimizer_label(name):
    """The ``optim.table.CONFIGS`` label for ``name`` (any case: "adam" -> "Adam")."""
    for label in CONFIGS:
        if label.lower() == str(name).lower():
            return label
    raise ValueError(f"unknown optimizer {name!r}; choose one of {', '.join(CONFIGS)}")


def offload_kind(offload):
    """None, "optimizer" (tinymem's ``offload_optimizer``: state and an fp32 master on the
    host, gradients made and kept on the device until the step) or "zero-offload" (ZeRO-Offload,
    Ren et al. 2021: each layer's gradients stream to the host as backward makes them; fp32
    gradients, masters and state live there, and the update runs on the CPU) or
    "zero-offload-params" (ZeRO-3's ``offload_param`` as well: the half weights wait on the host
    too, and each layer is fetched while it computes)."""
    if offload is False or offload is None:
        return None
    if offload is True or offload == "optimizer":
        return "optimizer"
    if offload in ("zero-offload", "zero-offload-params"):
        return offload
    raise ValueError(f"unknown offload {offload!r}; choose False, 'optimizer' (or True), 'zero-offload' "
                     "or 'zero-offload-params'")


TorchOptions = namedtuple("TorchOptions", "optimizer hold_logits attention checkpoint precision device")
TorchOptions.__new__.__defaults__ = (None, True, "math", False, "fp32", "cpu")
TorchOptions.__doc__ = """How a PyTorch step runs, for the planner's ``torch`` mode (PyTorch's defaults):
``optimizer`` AdamW's implementation, "for-loop" | "foreach" | "fused" (None: PyTorch's default on
the device, the for-loop on the CPU and foreach on CUDA); ``hold_logits`` the caller keeps the
logits through backward and the update (nanoGPT's ``logits, loss = model(X, Y)``); ``attention``
"math" (nanoGPT's masked_fill) | "sdpa"; ``checkpoint`` every block under
``torch.utils.checkpoint(use_reentrant=False)``; ``precision`` "fp32" | "bf16-autocast";
``device`` "cpu" (measured) | "cuda" (predicted, unmeasured). Tied embeddings and dropout are the
Arch's own fields."""
TORCH_CHOICES = dict(optimizer=(None, "for-loop", "foreach", "fused"), hold_logits=(True, False),
                     attention=("math", "sdpa"), checkpoint=(False, True), precision=("fp32", "bf16-autocast"),
                     device=("cpu", "cuda"))


def resolve_torch(options, arch, batch):
    """``options`` checked (a ValueError naming the field) with AdamW's default filled in for its
    device; ``arch`` (an Arch) a GPT (gelu, layernorm, learned positions) or a LLaMA (swiglu,
    rmsnorm, rotary, no biases, no dropout) without grouped-query attention or experts."""
    if not isinstance(options, TorchOptions):
        raise TypeError(f"options must be a planner.inputs.TorchOptions, got a {type(options).__name__}")
    for field, choices in TORCH_CHOICES.items():
        value = getattr(options, field)
        if not any(value is c or (type(value) is type(c) and value == c) for c in choices):
            raise ValueError(f"TorchOptions.{field} must be one of {', '.join(map(repr, choices))}, got {value!r}")
    positive_int("batch", batch)
    gpt = (arch.mlp, arch.norm, arch.positions) == ("gelu", "layernorm", "learned")
    llama = (arch.mlp, arch.norm, arch.positions, arch.bias) == ("swiglu", "rmsnorm", "rotary", False)
    if not (gpt or llama):
        raise ValueError(f"{arch.name}: the torch mode runs GPT (gelu, layernorm, learned positions) or LLaMA "
                         f"(swiglu, rmsnorm, rotary, no bias) layers, got {arch.mlp}/{arch.norm}/{arch.positions}")
    if llama and arch.dropout:
        raise ValueError(f"{arch.name}: a LLaMA trains without dropout in the torch mode, got {arch.dropout}")
    if archs.kv_heads(arch) != arch.heads or arch.experts != 1:
        raise ValueError(f"{arch.name}: grouped-query attention and experts are not in the torch mode")
    if options.precision == "bf16-autocast" and options.attention == "sdpa" and arch.dropout and options.device == "cpu":
        raise ValueError("SDPA with dropout under bf16 autocast runs PyTorch's math kernel in float32 on the CPU, "
                         "not in the torch mode: give dropout 0, attention='math' or precision='fp32'")
    default = "for-loop" if options.device == "cpu" else "foreach"
    return options._replace(optimizer=options.optimizer or default)


def parse_torch(text, flag="--torch"):
    """A :class:`TorchOptions` from comma-separated words (the ``flag``: --torch or
    --verify-torch): for-loop, foreach, fused, math, sdpa, hold-logits, no-hold-logits,
    checkpoint, fp32, bf16-autocast, cpu, cuda. An unknown word is refused, naming it and the
    flag, and so are two words that set one option differently (``foreach,fused``): which one
    was meant is unknown."""
    words = {"for-loop": ("optimizer", "for-loop"), "foreach": ("optimizer", "foreach"),
             "fused": ("optimizer", "fused"), "math": ("attention", "math"), "sdpa": ("attention", "sdpa"),
             "hold-logits": ("hold_logits", True), "no-hold-logits": ("hold_logits", False),
             "checkpoint": ("checkpoint", True), "fp32": ("precision", "fp32"),
             "bf16-autocast": ("precision", "bf16-autocast"), "cpu": ("device", "cpu"), "cuda": ("device", "cuda")}
    fields, said = {}, {}
    for word in filter(None, (w.strip() for w in str(text).split(","))):
        if word not in words:
            raise ValueError(f"{flag}: unknown word {word!r}; choose from {', '.join(words)}")
        field, value = words[word]
        if fields.get(field, value) != value:
            raise ValueError(f"{flag}: {said[field]!r} and {word!r} both set the {field}: give one")
        fields[field], said[field] = value, word
    return TorchOptions(**fields)
