"""02.5, log2 of the headroom rounded to the nearest integer instead of down."""
import math


def largest_safe_scale(max_abs_grad):
    return 2.0 ** round(math.log2(65520.0 / max_abs_grad))
