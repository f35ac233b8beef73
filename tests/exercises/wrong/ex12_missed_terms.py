"""Plausible wrong answers to lesson 12: the 1/std vectors and the per-head weights forgotten,
no 'never fits' case, and the stack's peak compared with the memory of all GPUs together."""


def layer_activation_bytes(seq, batch, hidden, heads, bytes_per_value):
    n = batch * seq
    return bytes_per_value * (16 * n * hidden + batch * seq * seq)


def fewest_gpus(params, bytes_per_param, fixed_bytes, gpu_memory):
    return -(-bytes_per_param * params // max(gpu_memory - fixed_bytes, 1))


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    from tinymem.planner import fits
    for name, stack in stacks:
        if fits.run(arch, 1, stack).peak <= gpus * gpu_memory:
            return name
    return None
