"""Wrong on purpose (exercise 11.3): every element counted as 4 bytes, whatever the maps' dtype."""
import math

TARGET = "layer_by_layer_peak"


def layer_by_layer_peak(shapes, bytes_per_element=4):
    sizes = [math.prod(s) * 4 for s in shapes]
    return max(i + o for i, o in zip(sizes[:-1], sizes[1:]))
