"""The closed form against the ledger: one real step of tinymem's TransformerLM per technique stack.

:func:`measure` trains the model a warm-up step (so the optimizer state exists) and then one
step inside ``memory.track``, and returns each bucket's own peak and the step's peak, without
what lived before the model was built (as :func:`tinymem.planner.measured.verify.measure_step`).
:func:`compare` puts :func:`tinymem.planner.terms.analytic.breakdown` beside it.

Single-machine stacks it can run: recompute none | full (every block its own checkpointed
segment but the last, ``checkpoint_sequential``'s cut) | sqrt; plain or chunked attention;
fp32, fp16 or bf16 (half weights, gradients and saved tensors, fp32 masters); int8 saved
tensors (``compress_saved_activations``, fp32 model); any optimizer of the planner; the
optimizer state on the host (fp32); k micro-batches. Selective recomputation needs a
checkpoint policy tinymem does not have yet: :func:`measure` refuses it.
"""
import contextlib
import gc

from ... import memory, random
from ...techniques.quantization.compressed import compress_saved_activations
from ..inputs import THIS_MACHINE, resolve
from ..terms import analytic
from ..model import architectures
from .recipe import Combination, supported, tracked_step
from .workloads import TransformerWorkload

CHECKPOINTS = {"none": "none", "full": "block", "sqrt": "sqrt"}


def combination(stack):
    """The planner :class:`~.recipe.Combination` that runs ``stack`` on one machine."""
    return combination_of(resolve(stack))


def combination_of(stack):
    """:func:`combination` below the door (``stack`` resolved); every refusal of a stack that one
    process cannot run is here."""
    if stack.recompute not in CHECKPOINTS:
        raise ValueError(f"recompute={stack.recompute!r} cannot be run here: tinymem's checkpoint "
                         "has no policy to keep all but the attention core (the selective term is "
                         "a formula only)")
    if stack.zero or stack.ranks > 1 or stack.pipeline > 1:
        raise ValueError("ZeRO, data parallel and pipeline stacks run under MPI "
                         "(tinymem.distributed.worker), not in one process")
    if stack.offload not in (False, True, "optimizer"):
        raise ValueError(f"offload={stack.offload!r} cannot be run here: tinymem's offload_optimizer keeps the "
                         "gradients on the device until the step (offload='optimizer'); streaming them to the "
                         "host as ZeRO-Offload does is a formula only")
    if stack.tensor > 1 or stack.sequence_parallel:
        raise ValueError("tensor and sequence parallelism are formulas only: tinymem has no tensor-parallel layers")
    if stack.storage not in (None, "int8") or (stack.storage == "int8" and stack.precision != "fp32"):
        raise ValueError("storage: None (the precision's) or int8 with an fp32 model")
    combo = Combination(CHECKPOINTS[stack.recompute], stack.precision, stack.label,
                        "optimizer" if stack.offload else "none", stack.micro_batches)
    reason = supported(combo)
    if reason:
        raise ValueError(reason)
    return combo


def model(sizes):
    """The Arch of ``sizes`` = (vocab, seq, hidden, heads, layers), checked: a sixth value was
    predicted as the dropout (measure refuses it), and a string or four values raised TypeError."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__len__") or len(sizes) != 5:
        raise ValueError(f"sizes are (vocab, seq, hidden, heads, layers), five whole numbers, got {sizes!r}")
    return architectures.tinymem_lm(*sizes)


def workload(sizes, stack, chunk_size=None):
    """``sizes`` = (vocab, seq, hidden, heads, layers) as a planner workload."""
    if stack.attention == "chunked" and chunk_size is None:
        raise ValueError("chunked attention needs a chunk_size")
    return TransformerWorkload(list(sizes), chunk_size=chunk_size if stack.attention == "chunked" else None)


def measure(sizes, batch, stack, chunk_size=None, seed=0):
    """``{"buckets": each bucket's peak, "peak": the step's peak, "split": buckets at the peak}``
    of one real step (bytes on the device, without what lived before the model)."""
    return measured(sizes, batch, resolve(stack, model(sizes), batch), chunk_size, seed)


def measured(sizes, batch, stack, chunk_size=None, seed=0):
    """:func:`measure` below the door (``stack`` resolved)."""
    work = workload(sizes, stack, chunk_size)
    combo = combination_of(stack)
    saving = (lambda: compress_saved_activations(bits=8)) if stack.storage == "int8" else contextlib.nullcontext
    random.manual_seed(seed)
    gc.collect()
    base = memory.LEDGER.by_bucket()
    t = tracked_step(work, combo, batch, saving)
    return {"buckets": {b: v - base[b] for b, v in t.max_by_bucket().items()},
            "peak": t.peak() - sum(base.values()),
            "split": {b: v - base[b] for b, v in t.peak_by_bucket().items()}}


def predict(sizes, batch, stack):
    """:func:`analytic.breakdown` of the same step in tinymem mode, on the device :func:`measure`
    runs on (the default one, :data:`~..inputs.THIS_MACHINE`: NumPy and CuPy's bf16 compute in
    float32; on CuPy the optimizer's update is fused and 8-bit Adam's chunks are the GPU's)."""
    arch = model(sizes)
    return predicted(arch, batch, resolve(stack, arch, batch, THIS_MACHINE))


def predicted(arch, batch, stack):
    """:func:`predict` below the door (``stack`` resolved on ``arch`` and its device)."""
    return analytic.evaluate(arch, batch, stack, mode="tinymem")


def compare(sizes, batch, stack, chunk_size=None):
    """``(predicted Breakdown, measured dict)`` for one configuration, its stack resolved once."""
    arch = model(sizes)
    resolved = resolve(stack, arch, batch, THIS_MACHINE)
    return predicted(arch, batch, resolved), measured(sizes, batch, resolved, chunk_size)
