"""Fine-tuning by formula: LoRA (Hu et al. 2021) and QLoRA (Dettmers et al. 2023) on one GPU.

The base model is frozen (no gradients, no optimizer state); rank-r adapters A (r x in) and
B (out x r) beside each adapted matrix train, in fp32 with Adam, as PEFT keeps them:

    LoRA    base      2·n bytes (bf16)
    QLoRA   base      b/8 bytes per weight of the adapted matrices, NF4 with double quantization:
                      4 bits + 8 bits per block of 64 (the block's scale, quantized) + 32 bits per
                      256 blocks (the scales' fp32 scale) = 4 + 0.125 + 0.00195 = 4.127 bits
                      (``techniques.lora.qlinear.expected_bits_per_weight``); embeddings, norms
                      and the head stay bf16 (2 bytes)
    both    adapters  16 bytes per adapter value: 4 weight + 4 gradient + 8 Adam's m and v;
                      r·(in + out) values per adapted matrix (every linear of every block:
                      q, k, v, o and the MLP's, as QLoRA does)
            saved     the frozen model's activations in bf16 (:func:`~.analytic.breakdown`, the
                      adapters' own r values per token are left out: r/h of one tensor)

The NF4 figure is checked against the stored arrays in ``tests/techniques/lora``; the adapters'
bytes against the ledger of a real LoRA step in ``tests/planner/test_finetune.py``.
"""
import math
from collections import namedtuple

from ...checks import is_int
from . import analytic
from ..model import architectures as archs

NF4_BLOCK, SCALE_BLOCKS = 64, 256
ADAPTER_BYTES = 16  # fp32 weight, gradient, Adam's m and v
METHODS = ("lora", "qlora")

Row = namedtuple("Row", "method base adapters activation workspace peak")


def nf4_bits(double_quant=True):
    """Bits per weight of NF4 storage: 4 + 8/64 + 32/(64·256) with double quantization, else
    4 + 32/64 (an fp32 scale per block)."""
    if not double_quant:
        return 4 + 32 / NF4_BLOCK
    return 4 + 8 / NF4_BLOCK + 32 / (NF4_BLOCK * SCALE_BLOCKS)


def adapted_shapes(arch):
    """``{(out, in): how many}`` of the matrices LoRA adapts: q, k, v and o, and the MLP's
    (every expert's in a mixture), in every layer."""
    arch = archs.get_arch(arch)
    h, f, kv = arch.hidden, archs.ffn(arch), archs.kv_heads(arch) * (arch.hidden // arch.heads)
    mlp = [(f, h), (h, f)] if arch.mlp == "gelu" else [(f, h), (f, h), (h, f)]
    counts = {}
    for shape, times in [((h, h), 2), ((kv, h), 2)] + [(s, arch.experts) for s in mlp]:
        counts[shape] = counts.get(shape, 0) + times * arch.layers
    return counts


def adapter_values(shapes, rank):
    """r·(in + out) per adapted matrix, summed over ``{(out, in): how many}``."""
    return sum(rank * (out + inp) * count for (out, inp), count in shapes.items())


def rows(arch, rank=16, batch=1, recompute="full"):
    """LoRA and QLoRA on one GPU: a :class:`Row` each (bytes)."""
    arch = archs.get_arch(arch)
    if not is_int(rank) or rank < 1:  # True was rank 1
        raise ValueError(f"the adapters' rank must be a positive integer, got {rank!r}")
    shapes = adapted_shapes(arch)
    n, adapted = archs.parameter_count(arch), sum(math.prod(s) * c for s, c in shapes.items())
    adapters = ADAPTER_BYTES * adapter_values(shapes, rank)
    frozen = analytic.breakdown(arch, batch, analytic.Stack("bf16", "SGD", recompute))
    act, work = frozen.buckets["activation"], frozen.buckets["workspace"]
    out = []
    for method, base in (("lora", 2 * n), ("qlora", nf4_bits() / 8 * adapted + 2 * (n - adapted))):
        out.append(Row(method, base, adapters, act, work, base + adapters + act + work))
    return out
