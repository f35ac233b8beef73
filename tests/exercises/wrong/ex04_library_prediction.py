"""04.2, the library's predicted_seconds called for the part without overlap."""
from tinymem.techniques import offload


def predicted_step_seconds(base_s, bytes_out, bytes_in, write_bw, read_bw, backward_s=None):
    bw = {"disk_write": write_bw, "disk_read": read_bw}
    total = offload.predicted_seconds(base_s, bytes_out, bytes_in, bw, "disk")
    if backward_s is not None:
        total -= min(backward_s, bytes_in / read_bw)
    return total
