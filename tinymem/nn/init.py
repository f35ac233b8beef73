"""Initialisation of weights: the distributions PyTorch's layers start from.

Memory: each function makes one new Parameter of the given shape (4 bytes per float32 element).
"""
from .. import random
from .module import Parameter


def uniform(shape, bound, device):
    """A Parameter of ``shape`` drawn from U(-bound, bound) with tinymem's seeded generator.

    ``bound = 1/sqrt(fan_in)`` gives PyTorch's default for Linear and Conv2d (what
    ``kaiming_uniform_(a=sqrt(5))`` works out to)."""
    return Parameter(random.uniform(-bound, bound, shape, device))


def normal(shape, device):
    """A Parameter of ``shape`` drawn from N(0, 1): PyTorch's default for embedding tables."""
    return Parameter(random.randn(shape, device))
