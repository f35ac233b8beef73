"""Row-wise Adagrad: one accumulator per table row, the optimizer of large embedding tables.

Adagrad keeps a running sum of squared gradients per parameter, 4 bytes per float32 weight, as
large as the table itself. Row-wise Adagrad (FBGEMM's ``rowwise_adagrad``, used by DLRM-style
recommenders) keeps one number per *row* instead, the running mean over the row of g²:

    s_r += mean_j(g_rj²)                 (one float per row r)
    w_rj -= lr · g_rj / (sqrt(s_r) + eps)

State: 4·R bytes for a table of R rows, a D-th of Adagrad's 4·R·D and a 2D-th of Adam's 8·R·D.
A parameter is read as rows along its first dimension (a 1-D bias: one row per element, so
there it is plain Adagrad).

It takes sparse gradients (:class:`tinymem.sparse.RowSparse`): only the touched rows are read
and written, so a step costs O(touched rows), not O(table). A row with zero gradient is left
unchanged either way (weight decay included), so sparse and dense gradients give the same
weights.
"""
from .. import backend
from .optimizer import Optimizer


class RowWiseAdagrad(Optimizer):
    accepts_sparse_grad = True

    def __init__(self, params, lr=1e-2, eps=1e-10, weight_decay=0.0, initial_accumulator_value=0.0):
        if eps < 0 or initial_accumulator_value < 0:
            raise ValueError(f"eps ({eps}) and initial_accumulator_value ({initial_accumulator_value}) must be >= 0")
        super().__init__(params, lr=lr, eps=eps, weight_decay=weight_decay,
                         initial_accumulator_value=initial_accumulator_value)

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter of ``shape``: one accumulator per row (first dim)."""
        return shape[0] * itemsize

    def update_parameter(self, p, grad, state, group):
        xp = backend.array_module(p.data)
        rows = p.data.reshape(p.shape[0], -1)  # a view: parameters are contiguous
        if "sum" not in state:
            state["step"] = 0
            state["sum"] = self.state_array(p.data, shape=(p.shape[0],),
                                             fill=group["initial_accumulator_value"])
        state["step"] += 1
        if getattr(grad, "is_sparse", False):
            grad = grad.coalesce()
            index, g = grad.indices, grad.values.reshape(len(grad.indices), -1)
        else:
            index, g = slice(None), grad.reshape(p.shape[0], -1)
        # Only rows with a nonzero gradient step, in both forms, as FBGEMM updates only the rows
        # looked up: a dense gradient's zero rows would otherwise take weight decay, normalised
        # by an empty accumulator (a large step), or 0 / 0 with eps = 0. The rows that stay put
        # are masked on the device (no decay, a step of 0), not picked out: which
        # rows move is known only on the device, and reading it on the host would stall every
        # step (one host sync). A dense step thus works on views of the whole table.
        moving = xp.any(g != 0, axis=1)
        if group["weight_decay"]:
            g = g + xp.where(moving[:, None], group["weight_decay"] * rows[index], 0)
        acc = state["sum"]
        acc[index] += xp.einsum("ij,ij->i", g, g) / g.shape[1]  # no (rows, D) temporary for g²
        # A still row's g is 0 and its factor lr / inf = 0 (not lr / 0: 0 · inf would be NaN).
        scale = xp.where(moving, xp.sqrt(acc[index]) + group["eps"], float("inf"))
        # One (rows, D) temporary: the per-row factor is folded before it meets g.
        rows[index] -= g * (group["lr"] / scale)[:, None]
