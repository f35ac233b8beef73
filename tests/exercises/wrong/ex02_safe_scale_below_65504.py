"""02.5, "finite" taken as <= 65504, float16's largest value (values up to 65520 round to it)."""
import math


def largest_safe_scale(max_abs_grad):
    return 2.0 ** math.floor(math.log2(65504.0 / max_abs_grad))
