"""02.2, the fields packed into a uint16 and reinterpreted by NumPy as a float16: the library's
answer, not the formula the exercise asks for."""
import numpy as np


def fp16_value(sign, exponent, mantissa):
    bits = np.array([(sign << 15) | (exponent << 10) | mantissa], np.uint16)
    return float(bits.view(np.float16)[0])
