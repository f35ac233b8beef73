"""08.2, the per-sample slope taken from one run (bytes / m_b), as if nothing were independent of the batch."""


def extrapolated_peak(rows_a, rows_b, phases, m_a, m_b, m):
    best, best_phase = None, None
    for row_b, phase in zip(rows_b, phases):
        row = {b: row_b[b] * m / m_b for b in row_b}
        if best is None or sum(row.values()) > sum(best.values()):
            best, best_phase = row, phase
    return sum(best.values()), best, best_phase
