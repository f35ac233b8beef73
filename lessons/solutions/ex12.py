"""Lesson 12: reference answers."""
import math


def layer_activation_bytes(seq, batch, hidden, heads, bytes_per_value):
    n = batch * seq
    values = (n * hidden + n            # ln1: x-hat and 1/std
              + n * hidden              # the qkv projection's input
              + 3 * n * hidden          # q, k, v (views of one projection output)
              + heads * batch * seq * seq  # the attention weights, one (s, s) per head and sequence
              + n * hidden              # the output projection's input (heads merged)
              + n * hidden + n          # ln2
              + n * hidden              # fc1's input
              + 4 * n * hidden          # GELU's input
              + 4 * n * hidden)         # fc2's input (GELU's output)
    return bytes_per_value * values


def fewest_gpus(params, bytes_per_param, fixed_bytes, gpu_memory):
    room = gpu_memory - fixed_bytes
    if room <= 0:
        return None
    return max(1, math.ceil(bytes_per_param * params / room))


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    from tinymem.planner import fits
    for name, stack in stacks:
        if fits.run(arch, 1, stack).peak <= gpu_memory:
            return name
    return None
