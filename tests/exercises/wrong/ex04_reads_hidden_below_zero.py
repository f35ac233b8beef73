"""04.2, the hidden reads subtracted without a floor: compute longer than the reads gives time back."""


def predicted_step_seconds(base_s, bytes_out, bytes_in, write_bw, read_bw, backward_s=None):
    read_s = bytes_in / read_bw
    if backward_s is not None:
        read_s -= backward_s
    return base_s + bytes_out / write_bw + read_s
