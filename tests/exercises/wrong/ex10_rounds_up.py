"""Wrong on purpose (exercise 10.4): rounds the capacity up, so the buffer overflows the budget."""
import math

TARGET = "capacity_for_budget"


def capacity_for_budget(budget_bytes, scheme, frame_shape, k):
    frame = math.prod(frame_shape)
    per = {"float32": 2 * k * frame * 4, "uint8": 2 * k * frame, "dedup": frame}[scheme] + 13
    return math.ceil(budget_bytes / per)
