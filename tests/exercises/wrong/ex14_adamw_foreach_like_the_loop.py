"""Lesson 14, one plausible wrong answer: foreach as if it also went one parameter at a time."""
TARGET = "adamw_temporary_bytes"


def adamw_temporary_bytes(sizes, implementation):
    if implementation == "fused":
        return 0
    return max(4 * (2 * size + before) for size, before in zip(sizes, [0] + list(sizes[:-1])))
