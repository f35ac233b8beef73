"""02.3, the library's converter called instead of the integer arithmetic."""
from tinymem.techniques.precision.bfloat16 import float32_to_bfloat16_bits


def to_bfloat16_bits(x):
    return float32_to_bfloat16_bits(x)
