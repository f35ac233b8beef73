"""Optimizers, one file each; every one reports its state bytes into the ``optimizer`` bucket."""
from .adam import Adam
from .optimizer import Optimizer
from .rowwise_adagrad import RowWiseAdagrad
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam"]
