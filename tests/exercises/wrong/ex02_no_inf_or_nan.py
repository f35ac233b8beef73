"""02.2, exponent 31 treated as a normal exponent: no inf, no NaN."""


def fp16_value(sign, exponent, mantissa):
    s = -1.0 if sign else 1.0
    if exponent == 0:
        return s * (mantissa / 1024) * 2.0 ** -14
    return s * (1 + mantissa / 1024) * 2.0 ** (exponent - 15)
