"""Activation layers and Dropout: no parameters, each a thin Module over a functional op."""
from .. import functional as F
from ..checks import dropout_probability
from .module import Module


class ReLU(Module):
    def forward(self, x):
        return F.relu(x)


class GELU(Module):
    """GELU, tanh approximation (tinymem has no erf-based GELU)."""

    def __init__(self, approximate="tanh"):
        super().__init__()
        F.check_gelu(approximate)  # at construction, not at the first forward
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)


class Tanh(Module):
    def forward(self, x):
        return F.tanh(x)


class Sigmoid(Module):
    def forward(self, x):
        return F.sigmoid(x)


class Identity(Module):
    def forward(self, x):
        return x


class Dropout(Module):
    """Dropout with the seeded RNG; identity in eval mode. Saves a 1-byte mask per element."""

    def __init__(self, p=0.5):
        super().__init__()
        self.p = dropout_probability("Dropout: dropout probability p", p)

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self):
        return f"p={self.p}"
