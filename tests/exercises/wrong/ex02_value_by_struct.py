"""02.2, the fields packed into two bytes and read back by struct's half-precision format."""
import struct


def fp16_value(sign, exponent, mantissa):
    return struct.unpack("<e", struct.pack("<H", (sign << 15) | (exponent << 10) | mantissa))[0]
