"""GaLore (Zhao et al., 2024): Adam on a low-rank projection of each matrix's gradient.

For a 2-D parameter W (m x n) and rank r < min(m, n), every ``update_proj_gap`` steps the top-r
singular vectors of the current gradient G become the projector P; in between:

    m >= n:  R = G P^T  (m x r), P = top-r right singular vectors (r x n)
    m <  n:  R = P^T G  (r x n), P = top-r left singular vectors (m x r)
    N = Adam's step on R (Adam's moments are r-sized)
    W -= scale * (N P  or  P N)            (projected back to m x n)

State per projected matrix: 4r(min(m, n) + 2 max(m, n)) bytes (P plus Adam's two moments on R)
instead of 8mn; other parameters (vectors, small matrices) get plain Adam, 8 bytes per element.
As in the reference implementation the moments are kept when P changes, although they were
accumulated in the old subspace. Time: an SVD of G (m x n) every ``update_proj_gap`` steps;
its U and V^T are counted as workspace, LAPACK's own workspace is not (the allocator measured
4 MiB beyond the ledger for a 512 x 512 gradient, in the step that refreshes P).
Pitfall: the update lies in an r-dimensional subspace between refreshes; ``scale`` (0.25 in the
paper) multiplies it, so GaLore's tuned ``lr`` is usually larger than Adam's.
"""
from .. import backend
from .adam import Adam


class GaLore(Adam):
    def __init__(self, params, lr=1e-3, rank=128, update_proj_gap=200, scale=0.25,
                 betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
        for group in self.param_groups:
            # A group's own values win, as for lr: a per-group rank is how GaLore's reference
            # API picks the groups to project.
            group.setdefault("rank", rank)
            group.setdefault("update_proj_gap", update_proj_gap)
            group.setdefault("scale", scale)
            if group["rank"] < 1 or group["update_proj_gap"] < 1:
                raise ValueError(f"rank and update_proj_gap must be >= 1, got {group['rank']}, "
                                 f"{group['update_proj_gap']}")

    @staticmethod
    def _projected(shape, group):
        return len(shape) == 2 and group["rank"] < min(shape)

    @staticmethod
    def bytes_for(shape, itemsize, group):
        """State bytes of one parameter: projector and low-rank moments, or Adam's 8 bytes/elem."""
        if not GaLore._projected(shape, group):
            return Adam.bytes_for(shape, itemsize, group)
        return group["rank"] * (min(shape) + 2 * max(shape)) * itemsize

    def update_parameter(self, p, grad, state, group):
        if not self._projected(p.shape, group):
            return super().update_parameter(p, grad, state, group)
        g = self._decay(p, grad, group)
        right = g.shape[0] >= g.shape[1]
        if "projector" not in state or state["step"] % group["update_proj_gap"] == 0:
            self._refresh(g, state, group["rank"], right)
        proj = state["projector"]
        low = self.scratch(g @ proj.T if right else proj.T @ g)
        step = self._moments(low, state, group)
        update = self.scratch(step @ proj if right else proj @ step)
        update *= group["scale"]
        p.data -= update

    def _refresh(self, g, state, rank, right):
        xp = backend.array_module(g)
        # u, vh are counted; LAPACK's own workspace inside svd is not visible to the ledger
        u, _, vh = (self.scratch(a) for a in xp.linalg.svd(g, full_matrices=False))
        top = vh[:rank] if right else u[:, :rank]
        if "projector" not in state:
            state["projector"] = self.state_array(g, shape=top.shape)
        state["projector"][...] = top
