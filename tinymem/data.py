"""Data sets that work offline, and a seeded batch iterator.

``load_digits()``: scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), standardised
with the training set's mean and std, split 80/20 by a fixed seed. Nothing is downloaded.
"""
import numpy as np

from .autograd import Tensor


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


class DataLoader:
    """Iterate ``(x, y, ...)`` batches of Tensors from arrays, shuffled by a seed per epoch.

    ``DataLoader((x, y), batch_size=64, shuffle=True, seed=0)``; each pass over it is one
    epoch and uses the next seed, so runs are reproducible.
    """

    def __init__(self, arrays, batch_size=64, shuffle=True, seed=0, drop_last=False, device=None):
        self.arrays = tuple(np.asarray(a) for a in arrays)
        if len({len(a) for a in self.arrays}) != 1:
            raise ValueError(f"arrays have different lengths: {[len(a) for a in self.arrays]}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        self.drop_last, self.device, self.epoch = drop_last, device, 0

    def __len__(self):
        n = len(self.arrays[0])
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def __iter__(self):
        n = len(self.arrays[0])
        order = (np.random.default_rng([self.seed, self.epoch]).permutation(n)
                 if self.shuffle else np.arange(n))
        self.epoch += 1
        for start in range(0, n, self.batch_size):
            idx = order[start:start + self.batch_size]
            if self.drop_last and len(idx) < self.batch_size:
                break
            yield tuple(Tensor(a[idx], device=self.device) for a in self.arrays)

from .data_seq import CharVocab, load_python_docs, random_windows, synthetic_clicks, unigram_loss  # noqa: E402,F401
