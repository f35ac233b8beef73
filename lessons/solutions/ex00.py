"""Lesson 0 reference answers."""


def mlp_parameter_bytes(sizes, bytes_per_value=4):
    return bytes_per_value * sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def mlp_activation_bytes(sizes, batch):
    # Each Linear saves its input; each ReLU saves its output, which is the next Linear's
    # input (one array, counted once); the loss saves probabilities and int64 targets.
    return 4 * batch * sum(sizes[:-1]) + 4 * batch * sizes[-1] + 8 * batch


def replay_peak(start, events):
    live = dict(start)
    peak, at_peak, phase, current_phase = sum(live.values()), dict(live), None, None
    for event in events:
        if event["kind"] == "mark":
            current_phase = event["label"]
            continue
        live[event["bucket"]] += event["bytes"] if event["kind"] == "alloc" else -event["bytes"]
        if sum(live.values()) > peak:  # strictly: the first moment the peak is reached
            peak, at_peak, phase = sum(live.values()), dict(live), current_phase
    return peak, at_peak, phase
