"""Layers and the Module that holds them, with PyTorch's names, defaults and initialisation.

    module.py      Module, Parameter, Sequential: finding weights and sub-modules
    init.py        the initial distributions of weights
    linear.py      Linear
    activation.py  ReLU, GELU, Tanh, Sigmoid, Identity, Dropout
    norm.py        LayerNorm, BatchNorm2d
    conv.py        Conv2d, MaxPool2d, AvgPool2d, Upsample
    attention.py   MultiheadAttention
    embedding.py   Embedding, EmbeddingBag
    utils.py       clip_grad_norm_

Parameters live in the ledger's ``parameter`` bucket: a Linear(in, out) in float32 holds
4·(in·out + out) bytes there.
"""
from . import init, utils
from .activation import GELU, Dropout, Identity, ReLU, Sigmoid, Tanh
from .attention import MultiheadAttention
from .conv import AvgPool2d, Conv2d, MaxPool2d, Upsample
from .embedding import Embedding, EmbeddingBag
from .linear import Linear
from .module import Module, Parameter, Sequential
from .norm import BatchNorm2d, LayerNorm

__all__ = ["Module", "Parameter", "Sequential", "Linear", "ReLU", "GELU", "Tanh", "Sigmoid", "Identity",
           "Dropout", "LayerNorm", "BatchNorm2d", "Conv2d", "MaxPool2d", "AvgPool2d", "Upsample",
           "MultiheadAttention", "Embedding", "EmbeddingBag", "init", "utils"]
