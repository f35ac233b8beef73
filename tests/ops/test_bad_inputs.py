"""Inputs that NumPy would take silently (a label of -1, an int batch, an empty batch) are
refused with a message naming what was wrong, as PyTorch refuses them."""
import warnings

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F


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
