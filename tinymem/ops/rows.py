"""Rows of a table looked up by id (``embedding``, ``embedding_bag``), out-of-range ids included.

On the CPU an id outside [0, rows) raises IndexError (NumPy would read -1 as the last row, and
raise a bare IndexError past the end). On a device the check would read the ids' min and max on
the host, two host syncs per lookup: there an id out of range reads as a NaN row instead (a float
table), as PyTorch's device assert does not raise on the host either, and its gradient is NaN
(where CuPy's scatter would wrap it into another row silently), so a GradScaler skips the step.

Memory: a gather of the looked-up rows, as ``weight[ids]``; on a device one bool per id and, in
backward, one temporary of the gradient rows' size.
"""
import numpy as np


def check_ids(xp, ids, num_rows, what):
    """Raise IndexError on the CPU for an id outside [0, num_rows); nothing on a device."""
    if xp is np and ids.size and (int(ids.min()) < 0 or int(ids.max()) >= num_rows):
        raise IndexError(f"{what} must be in [0, {num_rows}), got [{int(ids.min())}, {int(ids.max())}]")


def gather_rows(xp, weight, ids):
    """``weight[ids]``; on a device a row out of range is NaN (a float table), with no host sync."""
    if xp is np or weight.dtype.kind != "f":
        return weight[ids]
    valid = (ids >= 0) & (ids < weight.shape[0])  # gathered in range, then NaN where not
    return xp.where(valid[..., None], weight[xp.clip(ids, 0, weight.shape[0] - 1)], weight.dtype.type(np.nan))


def scatter_ids(xp, ids, rows, num_rows):
    """The ids and gradient rows to scatter into a table of ``num_rows`` rows: as they are on the
    CPU; on a device an id out of range goes to the clipped row with a NaN gradient."""
    if xp is np or rows.dtype.kind != "f":
        return ids, rows
    valid = (ids >= 0) & (ids < num_rows)
    rows = rows + xp.where(valid, rows.dtype.type(0), rows.dtype.type(np.nan))[:, None]
    return xp.clip(ids, 0, num_rows - 1), rows
