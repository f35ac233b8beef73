"""Wrong on purpose (exercise 11.3): keeps every activation alive (as training would), so the
peak is their sum, not the largest input + output."""
import math

TARGET = "layer_by_layer_peak"


def layer_by_layer_peak(shapes, bytes_per_element=4):
    return sum(math.prod(s) for s in shapes) * bytes_per_element
