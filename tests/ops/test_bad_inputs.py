"""Inputs that NumPy would take silently (a label of -1, an int batch, an empty batch) are
refused with a message naming what was wrong, as PyTorch refuses them."""
import warnings

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import backend


def _logits(n=4, classes=3):
    return tm.tensor(np.random.default_rng(0).standard_normal((n, classes)).astype(np.float32),
                     requires_grad=True)


@pytest.mark.parametrize("bad", [-1, 3, 100])
def test_cross_entropy_refuses_a_label_outside_the_classes(bad):
    with pytest.raises(IndexError, match=rf"target {bad} is out of bounds for 3 classes.*\[0, 2\]"):
        F.cross_entropy(_logits(), np.array([0, 1, bad, 2]))


def test_cross_entropy_takes_every_class_at_the_edges():
    loss = F.cross_entropy(_logits(), np.array([0, 2, 2, 0]))
    assert np.isfinite(loss.item())


@pytest.mark.parametrize("loss", ["cross_entropy", "mse_loss"])
def test_an_empty_batch_is_refused_instead_of_nan_and_warnings(loss):
    model = tm.nn.Linear(3, 2)
    x = tm.tensor(np.zeros((0, 3), np.float32))
    target = np.zeros(0, np.int64) if loss == "cross_entropy" else np.zeros((0, 2), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ValueError, match="empty batch"):
            getattr(F, loss)(model(x), target)
        total = getattr(F, loss)(model(x), target, reduction="sum")  # a sum over nothing is 0
    assert total.item() == 0.0


def test_linear_refuses_an_int_input_instead_of_computing_in_float64():
    layer = tm.nn.Linear(3, 2)
    with pytest.raises(TypeError, match="int64.*x.float()"):
        layer(tm.tensor([[1, 2, 3]]))
    assert layer(tm.tensor([[1, 2, 3]]).float()).dtype == np.float32


# -- shapes NumPy would broadcast, indices it would wrap, windows it would divide by zero ------------
def test_embedding_refuses_indices_outside_the_table():
    weight = tm.tensor(np.arange(12.0).reshape(4, 3), requires_grad=True)
    for bad in ([0, -1], [4]):  # -1 would silently read the last row
        with pytest.raises(IndexError, match=r"embedding indices must be in \[0, 4\)"):
            F.embedding(np.array(bad), weight)
    np.testing.assert_array_equal(F.embedding(np.array([3, 0]), weight).numpy(), [[9, 10, 11], [0, 1, 2]])


def test_conv2d_refuses_a_bias_that_is_not_one_per_output_channel():
    x, w = tm.tensor(np.ones((1, 2, 5, 5))), tm.tensor(np.ones((3, 2, 2, 2)))
    with pytest.raises(ValueError, match=r"bias of shape \(1,\) for 3 output channels"):
        F.conv2d(x, w, tm.tensor(np.ones(1)))
    assert F.conv2d(x, w, tm.tensor(np.ones(3))).shape == (1, 3, 4, 4)


@pytest.mark.parametrize("stride,padding", [(0, 0), (1, -1)])
def test_windows_refuse_zero_stride_and_negative_padding(stride, padding):
    x, w = tm.tensor(np.ones((1, 2, 6, 6))), tm.tensor(np.ones((3, 2, 2, 2)))
    with pytest.raises(ValueError, match="conv2d: kernel .* must be >= 1 and padding"):
        F.conv2d(x, w, stride=stride, padding=padding)
    for pool in (F.max_pool2d, F.avg_pool2d):
        with pytest.raises(ValueError, match="pool2d: kernel .* must be >= 1 and padding"):
            pool(x, 2, stride=stride, padding=padding)


@pytest.mark.parametrize("training", [False, True])
def test_batch_norm_refuses_statistics_of_another_channel_count(training):
    x = tm.tensor(np.random.default_rng(0).standard_normal((2, 3, 4, 4)))
    xp = backend.array_module(x.data)  # running statistics live on the input's device
    with pytest.raises(ValueError, match=r"running_mean of shape \(1,\) for 3 channels"):
        F.batch_norm(x, xp.zeros(1), xp.ones(1), training=training)
    with pytest.raises(ValueError, match=r"weight of shape \(2,\) for 3 channels"):
        F.batch_norm(x, xp.zeros(3), xp.ones(3), weight=tm.tensor(np.ones(2)), training=training)
    assert F.batch_norm(x, xp.zeros(3), xp.ones(3), training=training).shape == (2, 3, 4, 4)
