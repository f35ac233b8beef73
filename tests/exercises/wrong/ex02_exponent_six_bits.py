"""02.1, the fields cut at the wrong place: a 6-bit exponent and a 9-bit mantissa."""
import numpy as np


def fp16_fields(x):
    bits = int(np.float16(x).view(np.uint16))
    return bits >> 15, (bits >> 9) & 0x3F, bits & 0x1FF
