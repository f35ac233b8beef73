"""The digits data set: scikit-learn's bundled 8x8 images, offline.

``load_digits()``: scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), standardised
with the training set's mean and std, split 80/20 by a fixed seed. Nothing is downloaded.
"""
import numpy as np


def load_digits(test_fraction=0.2, seed=0, dtype=np.float32):
    """Return ``(x_train, y_train, x_test, y_test)`` as NumPy arrays (x standardised, y int64)."""
    from sklearn.datasets import load_digits as _load

    data = _load()
    x, y = data.data.astype(np.float64), data.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = int(round(len(x) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    mean, std = x[train].mean(0), x[train].std(0)
    std[std == 0] = 1.0  # constant border pixels
    x = ((x - mean) / std).astype(dtype)
    return x[train], y[train], x[test], y[test]
