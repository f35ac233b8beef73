"""06.1, the sums l rescaled to the common maximum but the accumulated values acc added as they are."""
import numpy as np


def merge_partials(a, b):
    (m1, l1, acc1), (m2, l2, acc2) = a, b
    m = np.maximum(m1, m2)
    return m, l1 * np.exp(m1 - m) + l2 * np.exp(m2 - m), acc1 + acc2
