"""Lesson 12 exercises: derive one term of the closed form, then find what it takes to train a
model on a given machine. Replace each body."""


def layer_activation_bytes(seq, batch, hidden, heads, bytes_per_value):
    """Bytes one block of tinymem's TransformerLM keeps for backward: plain attention, an MLP of
    width 4·hidden, no dropout, every float saved tensor stored in ``bytes_per_value`` bytes.
    List the saved tensors of ``TransformerBlock`` (ops/layers.py, ops/attention.py) and add
    them up; N = batch·seq tokens."""
    raise NotImplementedError("exercise 12.1")


def fewest_gpus(params, bytes_per_param, fixed_bytes, gpu_memory):
    """The fewest GPUs N with bytes_per_param·params/N + fixed_bytes <= gpu_memory (ZeRO-3:
    every model-state byte split N ways, activations and workspace not); ``None`` when no N
    does."""
    raise NotImplementedError("exercise 12.2")


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    """The name of the first ``(name, Stack)`` in ``stacks`` whose step, as
    ``tinymem.planner.search.fits.run(arch, 1, stack)`` predicts it (micro-batches of one sequence),
    peaks at or under ``gpu_memory`` bytes per GPU; ``None`` when none does. The stacks already
    carry ``gpus`` in their ranks or pipeline stages."""
    raise NotImplementedError("exercise 12.3")
