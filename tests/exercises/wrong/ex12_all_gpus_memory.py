"""Wrong on purpose (exercise 12.3): one GPU's peak held against the memory of all GPUs together."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    for name, stack in stacks:
        if fits.run(arch, 1, stack).peak <= gpus * gpu_memory:
            return name
    return None
