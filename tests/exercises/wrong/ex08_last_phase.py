"""08.2, the phase of the last event reported instead of the phase where the peak falls."""


def extrapolated_peak(rows_a, rows_b, phases, m_a, m_b, m):
    best = None
    for row_a, row_b in zip(rows_a, rows_b):
        row = {b: row_a[b] + (row_b[b] - row_a[b]) * (m - m_a) / (m_b - m_a) for b in row_a}
        if best is None or sum(row.values()) > sum(best.values()):
            best = row
    return sum(best.values()), best, phases[-1]
