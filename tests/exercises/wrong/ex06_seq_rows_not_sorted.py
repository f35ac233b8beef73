"""06.3, the rows in order of first appearance instead of increasing order."""
import numpy as np


def coalesce_rows(indices, values):
    rows = list(dict.fromkeys(int(i) for i in indices))
    where = {r: k for k, r in enumerate(rows)}
    summed = np.zeros((len(rows),) + values.shape[1:], values.dtype)
    for i, v in zip(indices, values):
        summed[where[int(i)]] += v
    return np.array(rows), summed
