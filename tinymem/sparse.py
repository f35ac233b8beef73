"""Row-sparse gradients: the gradient of an embedding table that only a few rows received.

An embedding lookup touches the rows its batch names and no others, so the gradient of a table
of R rows x D features is zero except on those rows. A dense gradient spends 4·R·D bytes (float32)
to say so; :class:`RowSparse` keeps only the touched rows: ``indices`` (n,) int64 and ``values``
(n, D), 8·n + 4·n·D bytes, with n at most the number of lookups in the batch. For a table of a
million rows and a batch touching a few thousand, that is hundreds of times smaller. This is what
PyTorch's ``sparse=True`` embeddings produce (a ``torch.sparse_coo_tensor``), in its simplest form.

Contract:
- It appears as ``param.grad.data`` of a table whose lookup was made with ``sparse=True``
  (``param.grad`` is the usual Tensor around it); ``.indices``, ``.values``, ``.shape``,
  ``.to_dense()`` read it. Gradients of two backward passes add up (indices concatenate, then
  :meth:`coalesce` sums repeated rows).
- Its arrays count in the ledger's ``gradient`` bucket from the moment it is made.
- Only optimizers written for it take it (``accepts_sparse_grad``: :class:`~tinymem.optim.RowWiseAdagrad`);
  the others raise a clear error, as PyTorch's Adam does. Sparse gradients reach the table only
  when the table is a leaf: a cast or a view of the table in between densifies nothing and is
  not supported.
- Once coalesced (as backward makes it) it remembers so, and the optimizer does not coalesce it
  again (a host sync on a GPU). Assigning new ``indices`` clears that; on the host the coalesced
  indices are read-only, so an in-place edit raises instead of leaving repeated rows that the
  update would apply once. On a device an in-place edit cannot be seen: assign a new array.
"""
import numpy as np

from . import memory
from .backend import array_module, device_of, scatter_add


class RowSparse:
    """A gradient of ``shape`` (R, ...) that is zero except on rows ``indices``: ``values[i]`` is row ``indices[i]``."""

    is_sparse = True
    # ``dense + sparse`` with the dense array on the left: without these NumPy (and CuPy) would
    # treat this object as a scalar and call __radd__ once per element; with them they hand
    # the whole sum to __radd__.
    __array_ufunc__ = None
    __array_priority__ = 1000

    def __init__(self, indices, values, shape):
        if indices.ndim != 1 or values.shape != (len(indices),) + tuple(shape[1:]):
            raise ValueError(f"RowSparse needs indices (n,) and values (n, *{tuple(shape[1:])}), "
                             f"got {indices.shape} and {values.shape}")
        self.indices, self.values, self.shape = indices, values, tuple(shape)
        self.coalesced = False  # set by coalesce(): each row at most once, rows sorted
        memory.register(indices, "gradient")
        memory.register(values, "gradient")

    @property
    def indices(self):
        return self._indices

    @indices.setter
    def indices(self, value):
        # New rows may repeat or be out of order: coalesce() must look at them again.
        self._indices, self.coalesced = value, False

    @property
    def dtype(self):
        return self.values.dtype

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def nbytes(self):
        return self.indices.nbytes + self.values.nbytes

    @property
    def device(self):
        return device_of(self.values)

    def coalesce(self):
        """The same gradient with each row at most once (repeated rows summed), rows sorted;
        itself when it already is. On a GPU finding the distinct rows reads their count on the
        host (a host sync, as PyTorch's coalesce on CUDA): done once, in backward, not again by
        the optimizer's step."""
        if self.coalesced:
            return self
        xp = array_module(self.values)
        rows, inverse = xp.unique(self.indices, return_inverse=True)
        if len(rows) == len(self.indices):
            order = xp.argsort(self.indices)
            out = RowSparse(self.indices[order], self.values[order], self.shape)
        else:
            values = xp.zeros((len(rows),) + self.values.shape[1:], self.values.dtype)
            scatter_add(xp, values, inverse.reshape(-1), self.values)
            out = RowSparse(rows, values, self.shape)
        out.coalesced = True
        if isinstance(out.indices, np.ndarray):
            out.indices.flags.writeable = False
        return out

    def coalesce_(self):
        """Coalesce in place: this object takes the coalesced arrays (for code that holds it, as
        ``param.grad`` does, and scales its values in place: a norm of repeated rows would be
        wrong). Returns itself."""
        if not self.coalesced:
            out = self.coalesce()
            self.indices, self.values = out.indices, out.values
            self.coalesced = True
        return self

    def to_dense(self):
        """The full (R, ...) array: 4·R·D bytes in float32, the thing this class avoids."""
        xp = array_module(self.values)
        out = xp.zeros(self.shape, self.values.dtype)
        scatter_add(xp, out, self.indices, self.values)
        return out

    def astype(self, dtype):
        out = RowSparse(self.indices, self.values.astype(dtype), self.shape)
        out.coalesced = self.coalesced
        return out

    def __add__(self, other):
        if isinstance(other, RowSparse):
            if other.shape != self.shape:
                raise ValueError(f"cannot add row-sparse gradients of shapes {self.shape} and {other.shape}")
            xp = array_module(self.values)
            return RowSparse(xp.concatenate([self.indices, other.indices]),
                             xp.concatenate([self.values, other.values]), self.shape).coalesce()
        # A dense gradient plus a sparse one is dense.
        if tuple(other.shape) != self.shape:
            raise ValueError(f"cannot add a dense gradient of shape {tuple(other.shape)} to a row-sparse "
                             f"one of shape {self.shape}")
        out = other.astype(self.values.dtype) if other.dtype != self.values.dtype else other.copy()
        scatter_add(array_module(out), out, self.indices, self.values)
        return out

    __radd__ = __add__

    def __repr__(self):
        return f"RowSparse(shape={self.shape}, rows={len(self.indices)}, dtype={self.dtype})"
