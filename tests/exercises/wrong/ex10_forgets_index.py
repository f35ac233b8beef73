"""Wrong on purpose (exercise 10.3): counts the frames but not the 13 bytes of index per slot."""
import math

TARGET = "bytes_per_transition"


def bytes_per_transition(scheme, frame_shape, k):
    frame = math.prod(frame_shape)
    return {"float32": 2 * k * frame * 4, "uint8": 2 * k * frame, "dedup": frame}[scheme]
