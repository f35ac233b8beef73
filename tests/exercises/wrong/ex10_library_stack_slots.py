"""Wrong on purpose (exercise 10.1): hands the question to the library's own index arithmetic."""
from tinymem.rl import stack_slots as library_stack_slots

TARGET = "stack_slots"


def stack_slots(ends, steps, k):
    return library_stack_slots(ends, steps, k)
