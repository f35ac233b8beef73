"""Wrong on purpose (exercise 12.3): asks the planner's own plan for the answer."""
from tinymem.planner import fits

TARGET = "first_stack_that_fits"


def first_stack_that_fits(arch, gpus, gpu_memory, stacks):
    rows, _ = fits.plan_arch(arch, gpus, gpu_memory)
    return next((r.name for r in rows if r.fits), None)
