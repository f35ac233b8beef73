"""Micro-batching gives the full-batch gradient at a fraction of the activation peak."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, models
from tinymem.techniques.microbatch import accumulate_gradients, split_batch


def _grads(model):
    return [p.grad.numpy().copy() for p in model.parameters()]


def _mlp_problem(n, dtype="float64"):
    rng = np.random.default_rng(0)
    model = models.MLP([6, 16, 16, 3]).to(dtype=dtype)
    x = tm.tensor(rng.standard_normal((n, 6)), dtype=dtype)
    y = tm.tensor(rng.integers(0, 3, n))
    return model, (x, y), lambda xb, yb: F.cross_entropy(model(xb), yb)


def test_split_batch_sizes():
    assert [s.stop - s.start for s in split_batch(10, micro_batches=3)] in ([4, 3, 3], [3, 4, 3], [3, 3, 4])
    assert [s.stop - s.start for s in split_batch(10, micro_batch_size=3)] == [3, 3, 3, 1]
    assert split_batch(5, micro_batches=5)[-1] == slice(4, 5)
    with pytest.raises(ValueError, match="exactly one"):
        split_batch(10)
    with pytest.raises(ValueError, match="between 1"):
        split_batch(3, micro_batches=4)


@pytest.mark.parametrize("split", [dict(micro_batches=2), dict(micro_batches=3),
                                   dict(micro_batch_size=3), dict(micro_batch_size=1)])
def test_mean_loss_gradient_equals_full_batch(split):
    """Even and uneven splits (10 = 4+3+3 = 3+3+3+1) give the full-batch gradient to 1e-6."""
    model, batch, loss_fn = _mlp_problem(10)
    full_loss = loss_fn(*batch)
    full_loss.backward()
    full = _grads(model)
    model.zero_grad()
    loss = accumulate_gradients(loss_fn, batch, **split)
    assert abs(loss - full_loss.item()) < 1e-12
    for g, ref in zip(_grads(model), full):
        np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-12)


def test_one_over_k_scaling_is_wrong_for_uneven_splits():
    """The pitfall the docstring names: weighting by 1/k instead of n_i/N changes the gradient."""
    model, (x, y), loss_fn = _mlp_problem(10)
    loss_fn(x, y).backward()
    full = _grads(model)
    model.zero_grad()
    for s in split_batch(10, micro_batch_size=3):
        (loss_fn(tm.tensor(x.data[s]), tm.tensor(y.data[s])) * (1 / 4)).backward()
    error = max(np.abs(g - r).max() for g, r in zip(_grads(model), full))
    assert error > 1e-3


def test_sum_loss_needs_no_scaling():
    model, batch, _ = _mlp_problem(7)
    loss_fn = lambda xb, yb: F.cross_entropy(model(xb), yb, reduction="sum")  # noqa: E731
    loss_fn(*batch).backward()
    full = _grads(model)
    model.zero_grad()
    accumulate_gradients(loss_fn, batch, micro_batches=3, reduction="sum")
    for g, ref in zip(_grads(model), full):
        np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-12)


def test_conv_net_gradient_equals_full_batch():
    rng = np.random.default_rng(1)
    net = tm.nn.Sequential(tm.nn.Conv2d(1, 4, 3, padding=1), tm.nn.ReLU(), tm.nn.MaxPool2d(2),
                           tm.nn.Conv2d(4, 3, 1)).to(dtype="float64")
    x = tm.tensor(rng.standard_normal((5, 1, 8, 8)))
    y = tm.tensor(rng.integers(0, 3, (5, 4, 4)))
    loss_fn = lambda xb, yb: models.segmentation_loss(net(xb), yb)  # noqa: E731
    loss_fn(x, y).backward()
    full = _grads(net)
    net.zero_grad()
    accumulate_gradients(loss_fn, (x, y), micro_batches=2)
    for g, ref in zip(_grads(net), full):
        np.testing.assert_allclose(g, ref, rtol=1e-6, atol=1e-12)


def test_activation_peak_shrinks_about_k_times():
    rng = np.random.default_rng(0)
    model = models.MLP([32, 256, 256, 10])
    x = tm.tensor(rng.standard_normal((256, 32)).astype(np.float32))
    y = tm.tensor(rng.integers(0, 10, 256))
    loss_fn = lambda xb, yb: F.cross_entropy(model(xb), yb)  # noqa: E731
    peaks = {}
    for k in (1, 4):
        model.zero_grad()
        with memory.track(measure=False) as t:
            accumulate_gradients(loss_fn, (x, y), micro_batches=k)
        peaks[k] = t.max_by_bucket()["activation"]
    ratio = peaks[4] / peaks[1]
    assert 0.2 <= ratio <= 0.3, (ratio, memory.format_table(t.max_by_bucket()))
