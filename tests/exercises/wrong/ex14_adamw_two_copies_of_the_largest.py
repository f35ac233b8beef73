"""Lesson 14, one plausible wrong answer: the for-loop's two temporaries of the largest
parameter, without the previous parameter's denominator still alive."""
TARGET = "adamw_temporary_bytes"


def adamw_temporary_bytes(sizes, implementation):
    return {"fused": 0, "foreach": 4 * sum(sizes)}.get(implementation, 8 * max(sizes))
