"""Wrong on purpose (exercise 10.4): divides by the library's formula instead of the student's own."""
from tinymem.rl import bytes_per_slot

TARGET = "capacity_for_budget"


def capacity_for_budget(budget_bytes, scheme, frame_shape, k):
    return budget_bytes // bytes_per_slot(scheme, frame_shape, k)
