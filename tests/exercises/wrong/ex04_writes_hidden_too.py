"""04.2, the writes also hidden behind backward's compute (they happen in forward)."""


def predicted_step_seconds(base_s, bytes_out, bytes_in, write_bw, read_bw, backward_s=None):
    transfer = bytes_out / write_bw + bytes_in / read_bw
    if backward_s is not None:
        transfer = max(0.0, transfer - backward_s)
    return base_s + transfer
