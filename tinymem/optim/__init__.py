"""Optimizers, one file each; every one reports its state bytes into the ``optimizer`` bucket.

Bytes of state per float32 parameter (``tinymem.optim.table`` computes them from the code):
SGD 0 (4 with momentum), Adagrad 4, RMSprop 4 (+4 momentum, +4 centered), Adam/AdamW 8 (12 with
amsgrad), Lion 4, Adafactor 4(m+n)/(mn) per m x n matrix, Adam8bit about 2, GaLore 4r(min+2max)/(mn).
"""
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam
from .adam8bit import Adam8bit
from .adamw import AdamW
from .galore import GaLore
from .lion import Lion
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .rowwise_adagrad import RowWiseAdagrad
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adagrad", "RMSprop", "Adam", "AdamW", "Lion", "Adafactor",
           "Adam8bit", "GaLore", "RowWiseAdagrad"]
