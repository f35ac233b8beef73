"""Wrong on purpose (exercise 10.3): returns the library's formula instead of deriving it."""
from tinymem.rl import bytes_per_slot

TARGET = "bytes_per_transition"


def bytes_per_transition(scheme, frame_shape, k):
    return bytes_per_slot(scheme, frame_shape, k)
