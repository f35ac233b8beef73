"""Lesson 4 exercises: the traffic and memory of offload, by formula. Replace each body."""


def offloaded_files(sizes, batch):
    """The bytes of each file save_on_disk writes for one forward of MLP(sizes) (ReLU) +
    cross-entropy loss, float32 inputs of shape (batch, sizes[0]) and int64 targets, as a list
    in the order the files are written."""
    raise NotImplementedError("exercise 04.1")


def predicted_step_seconds(base_s, bytes_out, bytes_in, write_bw, read_bw, backward_s=None):
    """Step time with offload: no overlap, or reads hidden behind ``backward_s`` of compute."""
    raise NotImplementedError("exercise 04.2")


def streaming_parameter_peak(sizes, prefetch):
    """Most parameter bytes stream_layers(MLP(sizes), prefetch=prefetch) holds on the device."""
    raise NotImplementedError("exercise 04.3")


def zero_offload_traffic(sizes):
    """{"link_bytes_per_step": ..., "host_bytes": ...} for MLP(sizes), Adam offloaded to the host."""
    raise NotImplementedError("exercise 04.4")
