"""Wrong answer to 07.5: S-s warm-up forwards instead of S-s-1 (one micro-batch more in flight)."""
TARGET = "one_f_one_b"


def one_f_one_b(stage, stages, micro_batches):
    warmup = min(stages - stage, micro_batches)
    order = [("F", m) for m in range(warmup)]
    for k in range(micro_batches - warmup):
        order += [("F", warmup + k), ("B", k)]
    return order + [("B", k) for k in range(micro_batches - warmup, micro_batches)]
