"""DataLoader: seeded, shuffled batches of Tensors from arrays, one epoch per pass."""
import numpy as np

from .. import backend
from ..autograd import Tensor
from ..checks import is_int


class DataLoader:
    """Iterate ``(x, y, ...)`` batches of Tensors from arrays, shuffled by a seed per epoch.

    ``DataLoader((x, y), batch_size=64, shuffle=True, seed=0)`` (NumPy or CuPy arrays, or Tensors,
    whose arrays are taken without their graph); each pass over it is one
    epoch and uses the next seed, so runs are reproducible. The arrays stay in host memory; each
    batch is copied to ``device`` (the default device when None): one batch on the device at a time.
    """

    def __init__(self, arrays, batch_size=64, shuffle=True, seed=0, drop_last=False, device=None):
        if hasattr(arrays, "shape") or isinstance(arrays, dict) or not isinstance(arrays, (tuple, list)):
            # One array would be read as a tuple of its rows, each a separate "array".
            raise TypeError(f"DataLoader takes a tuple of arrays, e.g. (x, y) or (x,); got a {type(arrays).__name__}")
        if not arrays:
            raise ValueError("DataLoader needs at least one array, e.g. (x, y)")
        # A Tensor gives its array (np.asarray of a Tensor is a 0-d object array, whose batches
        # failed later, in the model).
        self.arrays = tuple(_host_array(i, a) for i, a in enumerate(arrays))
        for i, a in enumerate(self.arrays):
            if a.dtype == object:
                raise TypeError(f"DataLoader's array {i} is not numeric (it became an array of Python objects "
                                f"from a {type(arrays[i]).__name__}): give NumPy or CuPy arrays or Tensors")
            if a.dtype.kind not in "biufc":  # strings, bytes, dates, records: no model takes them
                raise TypeError(f"DataLoader's array {i} holds {a.dtype} values, not numbers: encode them "
                                "first (e.g. token or class ids as integers)")
        for flag, value in (("shuffle", shuffle), ("drop_last", drop_last)):
            if not isinstance(value, (bool, np.bool_)):  # shuffle="no" is truthy: it shuffled
                raise TypeError(f"DataLoader's {flag} must be True or False, got {value!r}")
        if any(a.ndim == 0 for a in self.arrays):
            raise ValueError("DataLoader's arrays need a first (sample) dimension; got a scalar")
        if len({len(a) for a in self.arrays}) != 1:
            raise ValueError(f"arrays have different lengths: {[len(a) for a in self.arrays]}")
        if not is_int(batch_size) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if not is_int(seed) or seed < 0:  # NumPy's own errors ('unrecognized seed string') came at the first epoch
            raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
        self.batch_size, self.shuffle, self.seed = batch_size, shuffle, seed
        device = None if device is None else backend.check_device(device)  # None: the default at each batch
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


def _host_array(i, a):
    """Argument ``i`` of a DataLoader as a NumPy array (a Tensor's array, without its graph)."""
    try:
        return backend.to_numpy(a.data if isinstance(a, Tensor) else a)
    except ValueError as exc:  # a ragged nested list: NumPy's 'inhomogeneous shape'
        raise ValueError(f"DataLoader's array {i} cannot be made one array ({exc}); give arrays "
                         "whose rows all have one shape") from None
