"""Wrong on purpose (exercise 12.3): a peak exactly equal to the GPU's memory taken as not fitting."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    for name, stack in stacks:
        if fits.run(arch, 1, stack).peak < gpu_memory:
            return name
    return None
