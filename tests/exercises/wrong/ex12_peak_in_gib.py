"""Wrong on purpose (exercise 12.3): the peak in GiB held against the GPU's memory in GB (7% too lenient)."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    for name, stack in stacks:
        if fits.run(arch, 1, stack).peak / 2**30 <= gpu_memory / 1e9:
            return name
    return None
