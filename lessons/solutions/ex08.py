"""Lesson 8: reference answers."""
import math

STATE_PER_ELEMENT = {"SGD": 0, "SGD momentum": 4, "Adam": 8}
# Adam8bit's defaults; its two codebooks: 256 float32 values and a lookup table of 2**15 uint32 entries each
BLOCK, MIN_8BIT, MAP_BYTES = 2048, 4096, 2 * (256 * 4 + 4 * 2 ** 15)


def _state_bytes(optimizer, shape):
    n = math.prod(shape)
    if optimizer in STATE_PER_ELEMENT:
        return STATE_PER_ELEMENT[optimizer] * n
    if optimizer == "Adafactor":  # rows + columns of the last two dims; a vector keeps it all
        return 4 * n if len(shape) < 2 else 4 * (math.prod(shape[:-1]) + math.prod(shape[:-2]) * shape[-1])
    if optimizer == "Adam8bit":  # small tensors stay 32-bit; else 2 bytes + 2 scales per block
        return 8 * n if n < MIN_8BIT else 2 * n + 2 * 4 * math.ceil(n / BLOCK)
    raise ValueError(f"unknown optimizer {optimizer!r}")


def model_state_bytes(shapes, precision, optimizer, offload="none"):
    n = sum(math.prod(s) for s in shapes)
    width = 4 if precision == "fp32" else 2
    state = sum(_state_bytes(optimizer, s) for s in shapes)
    if optimizer == "Adam8bit" and any(math.prod(s) >= MIN_8BIT for s in shapes):
        state += MAP_BYTES  # the maps belong to the optimizer, once
    masters = 0 if precision == "fp32" else 4 * n  # fp32 masters count as optimizer state
    return {"parameter": width * n, "gradient": width * n,
            "optimizer": 0 if offload == "optimizer" else state + masters}


def extrapolated_peak(rows_a, rows_b, phases, m_a, m_b, m):
    if len(rows_a) != len(rows_b):
        raise ValueError("the two runs must have the same events")
    best, best_phase = None, None
    for row_a, row_b, phase in zip(rows_a, rows_b, phases):
        # every bucket of every event is c + a·m: extrapolate each, then compare the totals
        row = {b: row_a[b] + (row_b[b] - row_a[b]) * (m - m_a) / (m_b - m_a) for b in row_a}
        if best is None or sum(row.values()) > sum(best.values()):
            best, best_phase = row, phase
    return sum(best.values()), best, best_phase


def propose(rows, budget):
    fitting = [r for r in rows if r["bytes"] <= budget]
    return min(fitting, key=lambda r: (r["seconds"], r["bytes"])) if fitting else None


def micro_batches_needed(fixed_bytes, bytes_per_sample, batch_size, budget):
    k = 1
    while k <= batch_size and batch_size % k == 0:
        if fixed_bytes + bytes_per_sample * batch_size // k <= budget:
            return k
        k *= 2
    return None
