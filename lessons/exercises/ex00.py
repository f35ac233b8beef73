"""Lesson 0 exercises: the buckets of an MLP by formula, and a tracking window replayed by hand.
Replace each body."""


def mlp_parameter_bytes(sizes, bytes_per_value=4):
    """Bytes of the weights and biases of tinymem.models.MLP(sizes)."""
    raise NotImplementedError("exercise 00.1")


def mlp_activation_bytes(sizes, batch):
    """Activation bytes alive at the end of forward: MLP(sizes) (ReLU) + cross-entropy loss,
    float32 inputs of shape (batch, sizes[0]) and int64 targets."""
    raise NotImplementedError("exercise 00.2")


def replay_peak(start, events):
    """Replay a tracking window and return ``(peak, at_peak, phase)``.

    ``start``: {bucket: bytes} live on the device when the window opened. ``events``: dicts
    with "kind" ("alloc", "free" or "mark"), "bucket", "bytes" and "label", in order, as
    ``Tracker.timeline()`` lists them (without its "live" column). ``peak``: the highest total
    of live bytes, ``start`` included; ``at_peak``: {bucket: bytes} at the first moment the
    peak is reached; ``phase``: the label of the last mark before that moment (None if none).
    """
    raise NotImplementedError("exercise 00.3")
