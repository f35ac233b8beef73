"""Embedding tables: Embedding (one row per index) and EmbeddingBag (a sum or mean of rows).

Memory: a table of R rows of D floats is 4·R·D parameter bytes; with ``sparse=True`` an
EmbeddingBag's gradient holds only the rows its batch touched.
"""

from .. import backend
from .. import functional as F
from ..checks import positive_int, true_or_false
from ..ops.embedding_bag import MODES
from .init import normal
from .module import Module


def _table_shape(layer, num_embeddings, embedding_dim):
    return (positive_int(f"{layer}: num_embeddings", num_embeddings),
            positive_int(f"{layer}: embedding_dim", embedding_dim))


class Embedding(Module):
    """A table of ``num_embeddings`` rows of size ``embedding_dim``, init N(0, 1) as PyTorch."""

    def __init__(self, num_embeddings, embedding_dim, device=None):
        super().__init__()
        device = backend.check_device(device)
        self.num_embeddings, self.embedding_dim = _table_shape("Embedding", num_embeddings, embedding_dim)
        self.weight = normal((num_embeddings, embedding_dim), device)

    def forward(self, indices):
        return F.embedding(indices, self.weight)


class EmbeddingBag(Module):
    """PyTorch's ``nn.EmbeddingBag(num_embeddings, embedding_dim, mode="mean", sparse=False)``:
    the sum or mean of the rows each sample names. Table init N(0, 1) as PyTorch.

    Memory: the table is 4·R·D parameter bytes. With ``sparse=True`` its gradient is a
    :class:`tinymem.sparse.RowSparse` of the touched rows (8·u + 4·u·D bytes for u distinct
    ids) instead of a dense 4·R·D; pair it with :class:`tinymem.optim.RowWiseAdagrad`.
    """

    def __init__(self, num_embeddings, embedding_dim, mode="mean", sparse=False, device=None):
        super().__init__()
        device = backend.check_device(device)
        self.num_embeddings, self.embedding_dim = _table_shape("EmbeddingBag", num_embeddings, embedding_dim)
        if mode not in MODES:
            raise ValueError(f"EmbeddingBag: mode {mode!r} is not supported; choose one of {MODES}")
        self.mode, self.sparse = mode, true_or_false("EmbeddingBag: sparse", sparse)
        self.weight = normal((num_embeddings, embedding_dim), device)

    def forward(self, input, offsets=None):
        return F.embedding_bag(input, self.weight, offsets, mode=self.mode, sparse=self.sparse)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}, sparse={self.sparse}"
