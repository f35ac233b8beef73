"""Embedding bags: the sum or mean of a variable number of table rows per sample.

``input`` (B, N) gives B bags of N row ids each; or ``input`` (n,) with ``offsets`` (B,) gives
bag b = ``input[offsets[b]:offsets[b+1]]`` (PyTorch's layout; an empty bag gives zeros).

Memory: saves the row ids and their bag ids, 16·n bytes (int64) for n lookups, never the
gathered rows. The gradient of the table is either dense, 4·R·D bytes for R rows of size D in
float32 however few rows the batch touched, or (``sparse=True``) a :class:`~tinymem.sparse.RowSparse`
of the touched rows only: 8·u + 4·u·D bytes for u distinct ids. Forward gathers the n rows
(a transient 4·n·D bytes).
"""
import numpy as np

from ..autograd import Function
from ..backend import array_module, scatter_add
from ..checks import true_or_false
from ..sparse import RowSparse
from .rows import check_ids, gather_rows, scatter_ids

MODES = ("sum", "mean")


def _bags(xp, input, offsets):
    """Flat row ids, the bag of each, the number of bags, and ``bad``: None, or for offsets on a
    device a 0-d device bool saying whether they are invalid (then every bag reads NaN)."""
    if input.dtype.kind not in "iu":
        raise TypeError(f"embedding_bag ids must be integers, got {input.dtype}")
    if input.ndim == 2:
        if offsets is not None:
            raise ValueError("embedding_bag: offsets must be None when input is 2-D (B, N)")
        B, N = input.shape
        return input.reshape(-1), xp.repeat(xp.arange(B), N), B, None
    if offsets is not None and offsets.dtype.kind not in "iu":
        raise TypeError(f"embedding_bag offsets must be integers, got {offsets.dtype}")
    if input.ndim != 1 or offsets is None or offsets.ndim != 1:
        raise ValueError(f"embedding_bag expects input (B, N), or input (n,) with offsets (B,); "
                         f"got input {input.shape} and offsets "
                         f"{None if offsets is None else offsets.shape}")
    n, B = len(input), len(offsets)
    if not B:  # no bags: the ids belong to none, and the result is (0, D), as PyTorch's
        return input[:0], xp.zeros(0, xp.int32), 0, None
    bad = None
    if B:
        bad = (offsets[0] != 0) | (offsets[1:] < offsets[:-1]).any() | (offsets[-1] > n)
        if isinstance(offsets, np.ndarray):  # host offsets (the usual): checked for free
            if bad:
                raise ValueError("embedding_bag offsets must start at 0, not decrease and stay <= len(input)")
            bad = None
        else:
            # Device offsets are not read on the host (three syncs): clipped into range so the
            # bags below stay well formed, and if they were invalid every bag reads NaN.
            offsets = xp.clip(offsets, 0, n)
    offsets = xp.asarray(offsets)
    # int32: CuPy 13's scatter_add has no int64 (it came with CuPy 14); n row ids fit.
    starts = xp.zeros(n + 1, xp.int32)
    if B > 1:
        # +1 at every bag start after the first; a running sum then numbers the bags. An offset
        # of n (empty bags at the end) lands in slot n, dropped: no mask to size on the host.
        scatter_add(xp, starts, offsets[1:], 1)
    return input, xp.cumsum(starts[:n]), B, bad


class EmbeddingBag(Function):
    def forward(ctx, input, weight, offsets=None, mode="mean", sparse=False):
        xp = array_module(weight)
        if mode not in MODES:
            raise ValueError(f"embedding_bag mode {mode!r} is not supported; choose one of {MODES}")
        # Ids may arrive as host arrays for a table on the GPU.
        ids, bag, B, bad = _bags(xp, xp.asarray(input), offsets)
        # On a device an id out of range gives its bag NaN, not a host sync (ops/rows.py).
        check_ids(xp, ids, weight.shape[0], "embedding_bag ids")
        out = xp.zeros((B,) + weight.shape[1:], weight.dtype)
        scatter_add(xp, out, bag, gather_rows(xp, weight, ids))
        counts = xp.bincount(bag, minlength=B).astype(weight.dtype) if ids.size else xp.zeros(B, weight.dtype)
        if mode == "mean":
            out /= xp.maximum(counts, 1)[:, None]
        ctx.bad = bad if weight.dtype.kind == "f" else None
        if ctx.bad is not None:
            out = xp.where(bad, weight.dtype.type(np.nan), out)
        ctx.mode, ctx.sparse, ctx.table_shape = mode, bool(sparse), weight.shape
        ctx.save_for_backward(ids, bag, counts if mode == "mean" else None)
        return out

    def backward(ctx, g):
        ids, bag, counts = ctx.saved_tensors
        xp = array_module(g)
        rows = g[bag]
        if ctx.mode == "mean":
            rows /= counts[bag][:, None]
        ids, rows = scatter_ids(xp, ids, rows, ctx.table_shape[0])
        if ctx.bad is not None:  # invalid device offsets: the gradient is NaN too
            rows = xp.where(ctx.bad, rows.dtype.type(np.nan), rows)
        if ctx.sparse:
            # int64 indices whatever the ids' type: 8 bytes per row, as RowSparse documents.
            return None, RowSparse(ids.astype(xp.int64), rows, ctx.table_shape).coalesce()
        table = xp.zeros(ctx.table_shape, g.dtype)
        scatter_add(xp, table, ids, rows)
        return None, table


def embedding_bag(input, weight, offsets=None, mode="mean", sparse=False):
    """PyTorch's ``F.embedding_bag(input, weight, offsets, mode=..., sparse=...)`` for sum and
    mean: (B, D) bag sums or means of the rows of ``weight`` named by ``input``. ``input`` and
    ``offsets`` may be lists (made host arrays, as ``F.embedding`` takes them); empty offsets
    are no bags, a (0, D) result whatever the ids, as in PyTorch.

    Bad ids or offsets raise on the CPU (IndexError, ValueError), and so do host offsets for a
    table on a device; on a device, where checking would read them on the host (a sync per
    call), an id out of range makes its bag NaN and invalid device offsets make every bag NaN
    (a float table), gradients included, so a GradScaler skips the step.
    """
    offsets = None if offsets is None else _ids("offsets", offsets)
    sparse = true_or_false("embedding_bag: sparse", sparse)  # "no" would be a sparse gradient
    return EmbeddingBag.apply(_ids("input", input), weight, offsets, mode=mode, sparse=sparse)


def _ids(name, x):
    """Ids or offsets as an array: a Tensor's data, or a list made a host array at the door, as
    ``F.embedding`` takes a list (an empty list is int64: it has no values to say a type)."""
    from ..autograd import Tensor

    if isinstance(x, Tensor):
        return x.data
    if isinstance(x, (list, tuple)):
        return np.asarray(x) if len(x) else np.zeros(0, np.int64)
    if not hasattr(x, "dtype"):
        raise TypeError(f"embedding_bag: {name} must be an integer Tensor, array or list, got {type(x).__name__}")
    return x
