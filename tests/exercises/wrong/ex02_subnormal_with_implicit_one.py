"""02.2, subnormals given the implicit leading 1 (and exponent -15) of normal numbers."""
import math


def fp16_value(sign, exponent, mantissa):
    s = -1.0 if sign else 1.0
    if exponent == 31:
        return s * math.inf if mantissa == 0 else math.nan
    return s * (1 + mantissa / 1024) * 2.0 ** (exponent - 15)
