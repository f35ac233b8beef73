"""08.2, the peak event of each run found first and then extrapolated: wrong when the peak moves to another event."""


def extrapolated_peak(rows_a, rows_b, phases, m_a, m_b, m):
    i = max(range(len(rows_a)), key=lambda j: sum(rows_a[j].values()))
    j = max(range(len(rows_b)), key=lambda k: sum(rows_b[k].values()))
    row = {b: rows_a[i][b] + (rows_b[j][b] - rows_a[i][b]) * (m - m_a) / (m_b - m_a) for b in rows_a[i]}
    return sum(row.values()), row, phases[j]
