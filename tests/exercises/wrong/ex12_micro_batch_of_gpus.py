"""Wrong on purpose (exercise 12.3): a micro-batch of ``gpus`` sequences (one per GPU) instead of one."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    for name, stack in stacks:
        if fits.run(arch, gpus, stack).peak <= gpu_memory:
            return name
    return None
