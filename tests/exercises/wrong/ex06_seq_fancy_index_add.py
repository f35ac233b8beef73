"""06.3, summed[inverse] += values: NumPy's buffered fancy indexing keeps only one of the repeats."""
import numpy as np


def coalesce_rows(indices, values):
    rows, inverse = np.unique(indices, return_inverse=True)
    summed = np.zeros((len(rows),) + values.shape[1:], values.dtype)
    summed[inverse.reshape(-1)] += values
    return rows, summed
