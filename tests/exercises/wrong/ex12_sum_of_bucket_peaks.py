"""Wrong on purpose (exercise 12.3): the sum of each bucket's own peak for the step's peak; the
buckets peak at different moments, so that sum is more than is ever in use."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    for name, stack in stacks:
        if sum(fits.run(arch, 1, stack).buckets.values()) <= gpu_memory:
            return name
    return None
