"""Wrong on purpose (exercise 12.3): the stacks of 8 GPUs whatever the count asked about."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    for name, stack in fits.stacks(8):
        if fits.run(arch, 1, stack).peak <= gpu_memory:
            return name
    return None
