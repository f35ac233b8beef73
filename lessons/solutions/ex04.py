"""Lesson 4 reference answers."""


def _layers(sizes):
    return list(zip(sizes[:-1], sizes[1:]))


def offloaded_files(sizes, batch):
    # In forward order: the first Linear saves the input; each ReLU saves its output, which
    # *is* the next Linear's input, so offload writes it once; the weights stay resident; the
    # loss saves its probabilities, then the int64 targets.
    return [4 * batch * width for width in sizes[:-1]] + [4 * batch * sizes[-1], 8 * batch]


def predicted_step_seconds(base_s, bytes_out, bytes_in, write_bw, read_bw, backward_s=None):
    read_s = bytes_in / read_bw
    if backward_s is not None:
        read_s = max(0.0, read_s - backward_s)
    return base_s + bytes_out / write_bw + read_s


def streaming_parameter_peak(sizes, prefetch):
    layer = [4 * (a * b + b) for a, b in _layers(sizes)]
    window = prefetch + 1
    return max(sum(layer[i:i + window]) for i in range(len(layer)))


def zero_offload_traffic(sizes):
    n = sum(a * b + b for a, b in _layers(sizes))
    # Down: every gradient; up: every updated weight. On the host: a float32 master copy of the
    # weights and Adam's two moments.
    return {"link_bytes_per_step": 4 * n + 4 * n, "host_bytes": 4 * n + 8 * n}
