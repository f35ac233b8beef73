"""Model-state bytes per rank: parameters, gradients and optimizer state under ZeRO, data
parallel and pipeline stages, with the optimizer state on the device or the host.

With n parameters, N ranks and w = 4 bytes (fp32) or 2 (fp16/bf16 with fp32 masters, 4·n more
in the optimizer bucket), per rank (Rajbhandari et al. 2020):

    data parallel   w·n + w·n + S              S: the optimizer's state (optim.table) + masters
    ZeRO-1          w·n + w·n + S/N
    ZeRO-2          w·n + w·n/N + S/N
    ZeRO-3          w·n/N + w·n/N + S/N
    offload         "optimizer": S on the host (tinymem's offload_optimizer), sharded the same
                    way; "zero-offload": S, fp32 gradients and masters on the host, and the
                    half gradients stream there as backward makes them (0 on the device)

Mixed-precision Adam is the ZeRO paper's 2 + 2 + 12 = 16 bytes per parameter: 7.5B parameters
on 64 GPUs take 120, 31.4, 16.6 and 1.9 GB per GPU for stages 0 to 3.
"""
import functools
import math

import numpy as np

from ... import backend as tm_backend
from ...checks import positive_int
from ...optim import Adam
from ...optim.table import CONFIGS, group_for
from ..inputs import offload_kind, optimizer_label, width  # the door's lookups; model_states is an entry too
from .states import optimizer_state_bytes

# Temporaries the size of one parameter that an update holds at once (each optimizer's file
# counts them with ``scratch``); Adam8bit: 24 bytes per element of one chunk of at most
# ``Adam8bit.CHUNK`` elements on the CPU and 16M on a GPU (``backend.chunk_elements``): m, v,
# Adam's two, which quantizing reuses, and an int64 index.
SCRATCH = {"SGD": 1, "SGD momentum": 1, "Adam8bit": 6, "Adam8bit linear": 6}


def scratch_bytes(optimizer, shape, backend="gpu", fused_update=False):
    """Temporaries of one update of a float32 parameter of ``shape`` (see :data:`SCRATCH`;
    Adam8bit keeps tensors under ``min_8bit_size`` in float32 Adam, with Adam's 2, and updates
    larger ones chunk by chunk, in chunks sized for ``backend``: ``"numpy"`` or ``"gpu"``).

    ``fused_update``: tinymem's own step on a CuPy device, where Adam and its variants update a
    float32 parameter in one fused kernel (no temporary) and Adam8bit in five, beside its float32
    moments and their magnitudes padded to whole blocks (12 bytes per padded value). The
    ``"gpu"`` backend of the LLM-scale plans keeps the unfused count (PyTorch's default
    ``foreach`` Adam makes temporaries too)."""
    return update_scratch(optimizer_label(optimizer), shape, backend, fused_update)


def update_scratch(label, shape, backend="gpu", fused_update=False):
    """:func:`scratch_bytes` of an optimizer's ``optim.table`` label, resolved already."""
    cls, options = CONFIGS[label]
    group = dict(group_for(cls, options))
    size = math.prod(shape)
    fused = fused_update and issubclass(cls, Adam)
    if size < group.get("min_8bit_size", 0):
        return 0 if fused else 2 * 4 * size
    if fused:
        block = group.get("block_size")
        return 12 * block * math.ceil(size / block) if hasattr(cls, "CHUNK") and size else 0
    if hasattr(cls, "CHUNK"):
        chunk = tm_backend.chunk_elements("cpu" if backend == "numpy" else "cuda", cls.CHUNK)
        size = min(size, group["block_size"] * max(1, chunk // group["block_size"]))
    return SCRATCH.get(label, 2) * 4 * size


def shape_counts(params):
    """``params`` (a list of shapes, or ``{shape: how many}``) as ``{shape: how many}``; a
    dimension or a count that is not a whole number >= 0 is refused (it gave negative bytes)."""
    counts = {}
    for shape, count in (params.items() if isinstance(params, dict) else ((s, 1) for s in params)):
        shape = tuple(shape)
        if not all(_whole(d) for d in shape) or not _whole(count):
            raise ValueError(f"a parameter shape needs whole dimensions >= 0 and a whole count >= 0, got "
                             f"{shape!r} x {count!r}")
        counts[shape] = counts.get(shape, 0) + count
    return counts


def _whole(value):
    return (isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
            and value >= 0 and float(value).is_integer())


def optimizer_bytes(optimizer, params, itemsize=4):
    """Optimizer-state bytes for ``params``: a parameter count, a list of shapes or
    ``{shape: how many}`` (shapes are needed by optimizers whose state depends on them:
    Adafactor, GaLore), its values ``itemsize`` bytes each."""
    return state_bytes(optimizer_label(optimizer), params, itemsize)


def state_bytes(label, params, itemsize=4):
    """:func:`optimizer_bytes` of an optimizer's ``optim.table`` label, resolved already."""
    if not isinstance(params, (int, float, np.integer)):
        return _state_bytes(label, tuple(sorted(shape_counts(params).items())), itemsize)
    side = 1 << 10
    if optimizer_state_bytes(label, [(side, side)]) != optimizer_state_bytes(label, [(side * side,)]):
        raise ValueError(f"{label}'s state depends on the parameter shapes: pass the shapes "
                         "(architectures.shape_counts) instead of a count")
    return optimizer_state_bytes(label, [(parameter_total(params),)], itemsize)


@functools.lru_cache(maxsize=256)
def _state_bytes(label, counts, itemsize):
    return optimizer_state_bytes(label, dict(counts), itemsize)


def divide(nbytes, parts):
    """nbytes / parts, an int when it divides (bytes of a real run stay integers)."""
    return nbytes // parts if nbytes % parts == 0 else nbytes / parts


def parameter_total(params):
    """How many values: ``params`` a count, a list of shapes or ``{shape: how many}``."""
    if isinstance(params, (int, float, np.integer)):
        if not _whole(params):
            raise ValueError(f"a parameter count must be a whole number >= 0, got {params!r}")
        return int(params)
    if params is None or isinstance(params, (str, bytes)):  # a string was read one character a shape
        raise ValueError(f"params is a parameter count, a list of shapes or {{shape: how many}}, got {params!r}")
    return sum(math.prod(s) * c for s, c in shape_counts(params).items())


def _sharded(nbytes, ranks, units, per_element):
    """Bytes one rank keeps of a buffer split N ways: nbytes/N, or with ``units`` (element
    counts of the flat buffers, padded to a multiple of N as ZeRO pads them) Σ ceil(u/N)·bytes."""
    if units is None:
        return nbytes / ranks if ranks > 1 else nbytes
    return sum(-(-u // ranks) for u in units) * per_element


def model_states(params, stage=0, ranks=1, optimizer="adam", precision="mixed", offload=False, units=None):
    """Model-state bytes per rank: ``{"parameter", "gradient", "optimizer"}`` (and ``"host"``).

    ``params``: a count, a list of shapes or ``{shape: how many}``; ``stage``: ZeRO stage 0
    (data parallel) to 3; ``precision``: a name of :data:`.precision.WIDTHS` (fp32: 4 + 4 bytes
    + state; mixed/fp16/bf16: 2 + 2 + 4 of masters + state, the ZeRO paper's 16 bytes with
    Adam; bf16-pure: 2 + 2 + the state in bf16); ``offload``: see :func:`offload_kind` (the
    state and masters, and with "zero-offload" the gradients, live on the host, sharded the
    same way). ``units``: element counts of the flat buffers ZeRO shards (tinymem pads each to
    a multiple of N, and stages 1-2 keep the padded full buffer) for the exact bytes of a real
    run.

    7.5B parameters on 64 GPUs, mixed Adam: 120, 31.4, 16.6, 1.9 GB for stages 0-3.
    """
    if isinstance(stage, bool) or stage not in (0, 1, 2, 3):  # True was stage 1
        raise ValueError(f"ZeRO stage must be 0, 1, 2 or 3, got {stage!r}")
    ranks = positive_int("ranks", ranks)
    kind = offload_kind(offload)
    n = parameter_total(params)
    if units is not None and not all(_whole(u) for u in units):
        raise ValueError(f"units are element counts of flat buffers, whole numbers >= 0, got {list(units)!r}")
    width_ = width(precision)
    if kind == "zero-offload-params" and stage != 3:
        raise ValueError(f"offloading the parameters is ZeRO-3's offload_param: stage 3, got stage {stage}")
    return placed_states(params, n, stage, ranks, optimizer_label(optimizer), width_, kind, units)


def placed_states(params, n, stage, ranks, label, width, kind, units=None):
    """:func:`model_states` below the door: ``n`` values (of ``params``), the optimizer's
    ``label``, the precision's ``width`` and the offload ``kind`` resolved already."""
    w = width.weight
    state = state_bytes(label, params, width.state) + width.master * n
    per_element = state / n if n else 0
    # tinymem's ZeRO-1/2 keep every unit's parameters in one padded flat buffer.
    full = w * sum(-(-u // ranks) * ranks for u in units) if units is not None and stage in (1, 2) else w * n
    out = {"parameter": _sharded(w * n, ranks, units, w) if stage >= 3 else full,
           "gradient": _sharded(w * n, ranks, units, w) if stage >= 2 else w * n,
           "optimizer": _sharded(state, ranks, units, per_element) if stage >= 1 else state}
    out = {k: int(v) if float(v).is_integer() else v for k, v in out.items()}
    if kind == "optimizer":
        out["host"], out["optimizer"] = out["optimizer"], 0
    elif kind is not None:  # fp32 gradients, and an fp32 master of every weight, on the host
        extra = divide(4 * n + (0 if width.master else 4 * n), ranks if stage >= 1 else 1)
        out["host"], out["optimizer"], out["gradient"] = out["optimizer"] + extra, 0, 0
        if kind == "zero-offload-params":
            out["host"], out["parameter"] = out["host"] + out["parameter"], 0
    return out


def step_states(stage_shapes, n_stage, shapes, stack):
    """What a rank holds of the model states through one step of ``stack`` (resolved, below the
    door): ``(states, master gradients, scratch)``: :func:`placed_states` of its stage's
    ``stage_shapes`` (``n_stage`` values); the fp32 gradients the update reads (each rank needs
    its own shard's only, from ZeRO-1 on: a stage-1 rank reduces the half gradients and upcasts
    its shard; on the host when offloaded); and the update's temporaries for the largest of the
    model's ``shapes`` on the stack's device (none when the optimizer runs on the host)."""
    wd, kind, zero, ranks = stack.width, stack.kind, stack.zero, stack.ranks
    states = placed_states(stage_shapes, parameter_total(stage_shapes), zero, ranks, stack.label, wd, kind)
    masters = (divide(wd.master_gradient * n_stage, ranks if zero >= 1 else 1)
               if wd.master_gradient and kind is None else 0)
    scratch = 0 if stack.offload else max(update_scratch(stack.label, s, stack.device.chunks, stack.device.fused_update)
                                          for s in shapes)
    return states, masters, scratch
