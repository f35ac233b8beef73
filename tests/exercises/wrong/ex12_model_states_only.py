"""Wrong on purpose (exercise 12.3): the model states taken for the whole step (activations and
workspace forgotten)."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    for name, stack in stacks:
        states = fits.run(arch, 1, stack).moments["optimizer step"]
        if states["parameter"] + states["gradient"] + states["optimizer"] <= gpu_memory:
            return name
    return None
