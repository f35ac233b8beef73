"""Lesson 14, one plausible wrong answer: the fused kernel given foreach's sqrt of every moment."""
TARGET = "adamw_temporary_bytes"


def adamw_temporary_bytes(sizes, implementation):
    if implementation in ("fused", "foreach"):
        return 4 * sum(sizes)
    return max(4 * (2 * size + before) for size, before in zip(sizes, [0] + list(sizes[:-1])))
