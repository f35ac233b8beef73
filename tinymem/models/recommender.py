"""Recommender: embedding bags per categorical feature and an MLP, DLRM's sparse half.

Where the memory goes: almost all the bytes are the tables (4·R·D per table of R rows); with
dense gradients and Adam each table costs 4x that again (gradient + two moments). With
``sparse=True`` and row-wise Adagrad the gradient is the touched rows and the state 4·R bytes.
"""
import numpy as np

from .. import functional as F
from .. import nn


class Recommender(nn.Module):
    """One embedding bag per categorical feature, concatenated, then an MLP to 2 logits
    (click / no click): DLRM's sparse half without its pairwise interaction.

    ``table_sizes`` lists the rows of each table; ``sparse=True`` makes the tables' gradients
    :class:`tinymem.sparse.RowSparse`. ``forward(bags)`` takes one (B, N) id array per table.
    """

    def __init__(self, table_sizes, embedding_dim=16, hidden=64, sparse=True, mode="mean", device=None):
        super().__init__()
        self.tables = nn.Sequential(*[nn.EmbeddingBag(rows, embedding_dim, mode=mode, sparse=sparse, device=device)
                                      for rows in table_sizes])
        for table in self.tables:
            table.weight.data = table.weight.data * np.float32(0.1)
        self.mlp = nn.Sequential(nn.Linear(len(table_sizes) * embedding_dim, hidden, device=device),
                                 nn.ReLU(), nn.Linear(hidden, 2, device=device))

    def table_parameters(self):
        return [t.weight for t in self.tables]

    def dense_parameters(self):
        return self.mlp.parameters()

    def forward(self, bags):
        if len(bags) != len(self.tables):
            raise ValueError(f"expected {len(self.tables)} bags (one per table), got {len(bags)}")
        return self.mlp(F.cat([table(ids) for table, ids in zip(self.tables, bags)], axis=1))
