"""Wrong on purpose (exercise 12.3): walks the library's list for this GPU count, not the stacks it
was given."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    for name, stack in fits.stacks(gpus):
        if fits.run(arch, 1, stack).peak <= gpu_memory:
            return name
    return None
