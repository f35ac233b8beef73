"""Model states by formula: parameter, gradient and optimizer bytes from the parameter shapes.

This is what ``accelerate estimate-memory`` and DeepSpeed's ``estimate_zero*_model_states_mem_
needs`` compute, for one device, with every technique of the planner:

    parameter   4·N fp32, 2·N fp16/bf16 (the half weights), plus buffers (BatchNorm's running
                statistics, fp32 in every precision: 8 bytes per channel)
    gradient    4·N fp32, 2·N fp16/bf16 (the half gradients, between backward and the step)
    optimizer   Σ bytes_for(shape) from ``optim.table`` (SGD 0, momentum 4, Adam 8, Adafactor
                4(m+n)/(mn) per matrix, Adam8bit ~2 per parameter + 258 KiB of maps)
                + 4·N of fp32 masters with fp16/bf16 (``MasterOptimizer``)
                0 on the device with optimizer offload (the state and a 4·N master live on the host)

These are the bytes resident between steps (parameter, optimizer) or through backward (gradient).
The step's *peak* adds what the formulas leave out: activations, workspace, the fp32 master
gradients of a half model during its step (4·N), the host copies of optimizer offload; those come
from the probe (:mod:`.probe`). The tests hold these formulas against the ledger.
"""
import math

from ...optim.table import CONFIGS, group_for


def parameter_shapes(module):
    return [tuple(p.shape) for p in module.parameters()]


def buffer_bytes(module):
    """Bytes of non-parameter state (running statistics) the ledger counts as ``parameter``.

    0-d entries are left out: a step counter is a Python int in the layer, made an array only
    for ``state_dict``."""
    return sum(int(v.nbytes) for m in module.modules() for v in m._extra_state().values() if v.ndim)


def optimizer_state_bytes(label, shapes, itemsize=4):
    """State bytes ``CONFIGS[label]`` keeps for parameters of ``shapes`` (values of ``itemsize``
    bytes: 4 for float32). ``shapes``: a list of shapes, or ``{shape: how many}`` (a model of a
    million identical layers is a few distinct shapes: this costs the same at any depth)."""
    cls, options = CONFIGS[label]
    group = group_for(cls, options)
    counted = shapes.items() if isinstance(shapes, dict) else [(s, 1) for s in shapes]
    state = sum(count * cls.bytes_for(s, itemsize, group) for s, count in counted)
    if any(math.prod(s) >= group.get("min_8bit_size", math.inf) for s, _ in counted):
        state += cls.MAP_BYTES  # the quantization maps, once per optimizer
    return state


def model_states(shapes, combo, buffers=0):
    """``{"parameter", "gradient", "optimizer"}`` device bytes for ``combo`` (a Combination);
    ``buffers``: :func:`buffer_bytes` of the model."""
    n = sum(math.prod(s) for s in shapes)
    width = 4 if combo.precision == "fp32" else 2
    optimizer = optimizer_state_bytes(combo.optimizer, shapes)
    if combo.precision != "fp32":
        optimizer += 4 * n
    if combo.offload == "optimizer":
        optimizer = 0
    return {"parameter": width * n + buffers, "gradient": width * n, "optimizer": optimizer}
