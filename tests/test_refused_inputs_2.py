"""More inputs that used to end in a bare exception from inside NumPy or Python (IndexError,
AxisError, ZeroDivisionError, AttributeError, ...) or in a silently dubious answer, and are now
refused with a message naming the argument, what it got and what it expects. The comment on
each case says what happened before. Everything is built inside the call, not at import."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import nn, optim
from tinymem.checks import AxisError
from tinymem.techniques import quantization as Q
from tinymem.techniques.checkpoint import checkpoint, checkpoint_sequential
from tinymem.techniques.offload import offload_optimizer


def x23():
    return tm.randn(2, 3)


def P():
    return nn.Parameter(np.ones(3, np.float32))


CASES = {
    # IndexError 'list index out of range' from a Python list
    "transpose axis out of range": (lambda: F.transpose(x23(), 0, 5), AxisError,
                                    "transpose: axis 5 is out of range for a tensor with 2 dimensions"),
    # IndexError 'tuple index out of range'
    "cat of nothing": (lambda: F.cat([]), ValueError, "concatenate needs at least one tensor"),
    "cat of one tensor": (lambda: F.cat(x23()), TypeError, "list or tuple of tensors, got a Tensor"),
    "cat axis out of range": (lambda: F.cat([x23(), x23()], axis=5), AxisError, "concatenate: axis 5"),
    # NumPy's AxisError from deep inside np.stack / x.max
    "stack axis out of range": (lambda: F.stack([x23(), x23()], axis=5), AxisError, "stack: axis 5"),
    "softmax axis out of range": (lambda: F.softmax(x23(), axis=5), AxisError, "softmax: axis 5"),
    "log_softmax axis out of range": (lambda: F.log_softmax(x23(), axis=-3), AxisError, "log_softmax: axis -3"),
    # IndexError without the op's name
    "sum axis out of range": (lambda: F.sum(x23(), axis=2), AxisError, "sum: axis 2 is out of range"),
    # NumPy's broadcast error, and a bias of shape (1,) was added to every output silently
    "linear bias of the wrong length": (lambda: F.linear(x23(), tm.randn(4, 3), tm.randn(5)), ValueError,
                                        r"bias of shape \(5,\) for weight of shape \(4, 3\); it must be \(4,\)"),
    "linear bias of one element": (lambda: F.linear(x23(), tm.randn(4, 3), tm.randn(1)), ValueError, "it must be"),
    # IndexError 'tuple index out of range'
    "linear weight 1-d": (lambda: F.linear(x23(), tm.randn(3)), ValueError, "weight \\(out_features, in_features\\)"),
    "Linear on a 0-d input": (lambda: nn.Linear(3, 2)(tm.tensor(np.float32(1.0))), ValueError, "does not fit weight"),
    # AttributeError 'list' object has no attribute 'dtype'
    "Linear on a list": (lambda: nn.Linear(3, 2)([[1.0, 2.0, 3.0]]), TypeError, "input must be a Tensor or an array"),
    # a 1-d table gave one number per index
    "embedding of a 1-d table": (lambda: F.embedding(np.array([0, 1]), tm.randn(5)), ValueError, "2-d table"),
    # IndexError 'arrays used as indices must be of integer type'
    "embedding_bag float offsets": (lambda: F.embedding_bag(np.array([0, 1, 2]), tm.randn(5, 3),
                                                            np.array([0.0, 2.0])), TypeError, "offsets must be integers"),
    # UFuncTypeError from exp()
    "attention on integers": (lambda: F.scaled_dot_product_attention(*(tm.tensor(np.ones((1, 1, 2, 2), np.int64)),) * 3),
                              TypeError, "must be floating"),
    # built without complaint (a layer of no features), or ZeroDivisionError, or NumPy's
    # 'negative dimensions are not allowed'
    "Linear(0, 3)": (lambda: nn.Linear(0, 3), ValueError, "Linear: in_features must be a positive integer, got 0"),
    "Linear(3, -1)": (lambda: nn.Linear(3, -1), ValueError, "out_features must be a positive integer, got -1"),
    "Linear(2.5, 3)": (lambda: nn.Linear(2.5, 3), ValueError, "in_features must be a positive integer, got 2.5"),
    "Conv2d(0, 4, 3)": (lambda: nn.Conv2d(0, 4, 3), ValueError, "Conv2d: in_channels must be a positive integer"),
    "Conv2d(-1, 4, 3)": (lambda: nn.Conv2d(-1, 4, 3), ValueError, "in_channels must be a positive integer, got -1"),
    "Conv2d kernel 0": (lambda: nn.Conv2d(3, 4, 0), ValueError, r"Conv2d: kernel \(0, 0\)"),
    "MaxPool2d(0)": (lambda: nn.MaxPool2d(0), ValueError, r"MaxPool2d: kernel \(0, 0\)"),
    "AvgPool2d stride 0": (lambda: nn.AvgPool2d(2, stride=0), ValueError, r"AvgPool2d: kernel \(2, 2\) and stride \(0, 0\)"),
    "Upsample(0)": (lambda: nn.Upsample(0), ValueError, "Upsample: scale_factor must be a positive integer"),
    "Upsample bilinear": (lambda: nn.Upsample(mode="bilinear"), ValueError, "mode='nearest' only"),
    "Embedding(0, 4)": (lambda: nn.Embedding(0, 4), ValueError, "Embedding: num_embeddings must be a positive integer"),
    "EmbeddingBag(5, -1)": (lambda: nn.EmbeddingBag(5, -1), ValueError, "embedding_dim must be a positive integer"),
    "EmbeddingBag mode max": (lambda: nn.EmbeddingBag(5, 3, mode="max"), ValueError, "mode 'max' is not supported"),
    "LayerNorm(0)": (lambda: nn.LayerNorm(0), ValueError, "each size of normalized_shape must be a positive integer"),
    "LayerNorm eps < 0": (lambda: nn.LayerNorm(3, eps=-1), ValueError, "LayerNorm: eps must be > 0"),
    "BatchNorm2d(0)": (lambda: nn.BatchNorm2d(0), ValueError, "num_features must be a positive integer, got 0"),
    # the running mean diverged
    "BatchNorm2d momentum 2": (lambda: nn.BatchNorm2d(3, momentum=2), ValueError, r"momentum must be in \[0, 1\]"),
    "MultiheadAttention(0, 1)": (lambda: nn.MultiheadAttention(0, 1), ValueError, "embed_dim must be a positive integer"),
    "MultiheadAttention(8, 0)": (lambda: nn.MultiheadAttention(8, 0), ValueError, "num_heads must be a positive integer"),
    "MultiheadAttention(8, -2)": (lambda: nn.MultiheadAttention(8, -2), ValueError, "num_heads must be a positive"),
    "MultiheadAttention chunk 0": (lambda: nn.MultiheadAttention(8, 2, chunk_size=0), ValueError, "chunk_size"),
    # IndexError 'list index out of range'
    "Sequential index out of range": (lambda: nn.Sequential(nn.ReLU())[5], IndexError,
                                      "Sequential index 5 is out of range: it holds 1 modules"),
    # optimizers. TypeError "'Linear' object is not iterable", "'NoneType' object is not iterable"
    "Adam of a module": (lambda: optim.Adam(nn.Linear(2, 2)), TypeError, "got a Linear module: pass model.parameters()"),
    "Adam of None": (lambda: optim.Adam(None), TypeError, "params must be an iterable of Tensors"),
    # TypeError "'float' object is not subscriptable"
    "Adam betas 0.9": (lambda: optim.Adam([P()], betas=0.9), TypeError, r"betas must be a pair \(beta1, beta2\), got 0.9"),
    "Lion betas of three": (lambda: optim.Lion([P()], betas=(0.9, 0.9, 0.9)), TypeError, "betas must be a pair"),
    # NumPy's UFuncTypeError at Adam's step (SGD stepped with it silently)
    "integer gradient": (lambda: setattr(P(), "grad", np.ones(3, np.int64)), TypeError,
                         "assigned grad of dtype int64 to a float32 tensor"),
    # techniques. TypeError "'Linear' object is not iterable"
    "checkpoint_sequential of a Linear": (lambda: checkpoint_sequential(nn.Linear(2, 2), 1, tm.randn(1, 2)), TypeError,
                                          "takes an nn.Sequential or a list of layers, got a Linear"),
    # TypeError "'int' object is not callable", raised from inside the recomputation Function
    "checkpoint of a number": (lambda: checkpoint(5, tm.randn(2, requires_grad=True)), TypeError,
                               "checkpoint: the first argument must be the function or Module"),
    # AttributeError "'NoneType' object has no attribute 'update_place'"
    "offload_optimizer of None": (lambda: offload_optimizer(None), TypeError, "offload_optimizer wraps a tinymem optimizer"),
    # AttributeError "'function' object has no attribute 'named_modules'"
    "quantize a function": (lambda: Q.prepare(lambda x: x), TypeError, "quantization works on an nn.Module"),
    # it calibrated on the batch's rows, one by one
    "calibrate on one tensor": (lambda: Q.calibrate(Q.prepare(nn.Sequential(nn.Linear(2, 2))), tm.ones(2, 2)),
                                TypeError, "iterable of batches, got one Tensor"),
    # NumPy's AxisError from moveaxis
    "per-channel observer axis 5": (lambda: Q.PerChannelMinMaxObserver(ch_axis=5)(np.ones((2, 3), np.float32)),
                                    AxisError, r"PerChannelMinMaxObserver\(ch_axis\): axis 5"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_refused_with_a_message_saying_what_was_wrong(name):
    make, error, message = CASES[name]
    with pytest.raises(error, match=message):
        make()


def test_axis_error_is_caught_as_value_error_and_as_index_error():
    for error in (ValueError, IndexError):
        with pytest.raises(error):
            F.sum(x23(), axis=7)


def test_the_checks_leave_valid_input_alone():
    x = x23()
    assert F.transpose(x, -1, 0).shape == (3, 2) and F.sum(x, axis=np.int64(1)).shape == (2,)
    assert F.cat((x, x), axis=-1).shape == (2, 6) and F.stack([x, x], axis=-1).shape == (2, 3, 2)
    assert F.cat(t for t in (x, x)).shape == (4, 3)
    assert F.linear(x, tm.randn(4, 3), tm.randn(4)).shape == (2, 4)
    assert nn.Sequential(nn.ReLU(), nn.Tanh())[-1].__class__ is nn.Tanh
    assert nn.LayerNorm((2, 3))(tm.randn(4, 2, 3)).shape == (4, 2, 3)
    assert nn.Linear(np.int64(3), 2).in_features == 3 and nn.Upsample(2.0).scale_factor == 2.0
    assert optim.Adam([P()], betas=[0.8, 0.9]).param_groups[0]["betas"] == (0.8, 0.9)
    p = P()
    p.grad = np.ones(3, np.float64)  # a float gradient of another width is still taken
    assert p.grad.shape == (3,)
