"""Lesson 8: reference answers."""


def model_state_bytes(n_params, precision, optimizer_bytes_per_param):
    width = 4 if precision == "fp32" else 2
    masters = 0 if precision == "fp32" else 4 * n_params
    return {"parameter": width * n_params, "gradient": width * n_params,
            "optimizer": optimizer_bytes_per_param * n_params + masters}


def extrapolated_peak(totals_a, totals_b, m_a, m_b, m):
    if len(totals_a) != len(totals_b):
        raise ValueError("the two runs must have the same events")
    slope = [(b - a) / (m_b - m_a) for a, b in zip(totals_a, totals_b)]
    return max(a + s * (m - m_a) for a, s in zip(totals_a, slope))


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
