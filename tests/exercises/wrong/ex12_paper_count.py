"""Plausible wrong answers to lesson 12: Korthikanti's 16-bit count for tinymem's block, the
floor of the GPU count, and model states taken for the whole step."""
import math


def layer_activation_bytes(seq, batch, hidden, heads, bytes_per_value):
    # The paper's count (dropout masks and outputs, LayerNorm inputs) is not tinymem's block.
    return seq * batch * hidden * (34 + 5 * heads * seq / hidden) * bytes_per_value / 2


def fewest_gpus(params, bytes_per_param, fixed_bytes, gpu_memory):
    room = gpu_memory - fixed_bytes
    return None if room <= 0 else max(1, math.floor(bytes_per_param * params / room))


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    from tinymem.planner import fits
    for name, stack in stacks:
        states = fits.run(arch, 1, stack).moments["optimizer step"]
        if states["parameter"] + states["gradient"] + states["optimizer"] <= gpu_memory:
            return name
    return None
