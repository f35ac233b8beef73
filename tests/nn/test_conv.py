"""Vision ops (conv2d, pooling, upsampling, batch norm): gradients against float64 central
differences and against PyTorch, driven by one table of ops."""
import numpy as np
import pytest
from conftest import assert_close, requires_torch, to_np

import tinymem as tm
import tinymem.functional as F
from tinymem import autograd, backend, memory
from tinymem.ops import conv as conv_ops

# name -> (tinymem fn, torch fn name or lambda, input shapes, kwargs)
OPS = {
    "conv_pad1": (F.conv2d, "conv2d", [(2, 3, 6, 5), (4, 3, 3, 3), (4,)], dict(padding=1)),
    "conv_stride2": (F.conv2d, "conv2d", [(2, 2, 7, 7), (3, 2, 3, 3), (3,)], dict(stride=2, padding=1)),
    "conv_rect_nobias": (F.conv2d, "conv2d", [(1, 2, 6, 7), (3, 2, 2, 3)], dict(stride=(2, 1), padding=(1, 0))),
    "conv_1x1": (F.conv2d, "conv2d", [(2, 4, 3, 3), (2, 4, 1, 1), (2,)], {}),
    "max_pool2": (F.max_pool2d, "max_pool2d", [(2, 3, 6, 6)], dict(kernel_size=2)),
    "max_pool3_s2_p1": (F.max_pool2d, "max_pool2d", [(1, 2, 7, 6)], dict(kernel_size=3, stride=2, padding=1)),
    "avg_pool2": (F.avg_pool2d, "avg_pool2d", [(2, 3, 6, 6)], dict(kernel_size=2)),
    "avg_pool3_s1_p1": (F.avg_pool2d, "avg_pool2d", [(1, 2, 5, 6)], dict(kernel_size=3, stride=1, padding=1)),
    "upsample2": (F.interpolate, "interpolate", [(2, 3, 3, 4)], dict(scale_factor=2, mode="nearest")),
    "upsample3": (F.interpolate, "interpolate", [(1, 2, 2, 3)], dict(scale_factor=3, mode="nearest")),
    "batch_norm_train": (lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
                         lambda x, w, b: __import__("torch").nn.functional.batch_norm(
                             x, None, None, w, b, training=True),
                         [(3, 2, 4, 3), (2,), (2,)], {}),
}


def _inputs(shapes, dtype, device):
    rng = np.random.default_rng(1)
    return [tm.tensor(rng.standard_normal(s), dtype=dtype, device=device, requires_grad=True) for s in shapes]


@pytest.mark.parametrize("name", OPS)
def test_gradients_match_central_differences(name):
    fn, _, shapes, kwargs = OPS[name]
    xs = _inputs(shapes, "float64", "cpu")
    out = fn(*xs, **kwargs)
    upstream = np.random.default_rng(2).standard_normal(out.shape)
    out.backward(upstream)
    eps = 1e-6
    for x in xs:
        numeric = np.zeros(x.shape)
        flat = x.data.reshape(-1)
        for i in range(flat.size):
            keep = flat[i]
            flat[i] = keep + eps
            plus = (fn(*[tm.tensor(v.data, device="cpu") for v in xs], **kwargs).data * upstream).sum()
            flat[i] = keep - eps
            minus = (fn(*[tm.tensor(v.data, device="cpu") for v in xs], **kwargs).data * upstream).sum()
            flat[i] = keep
            numeric.reshape(-1)[i] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-5, atol=1e-7, err_msg=name)


@requires_torch
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", OPS)
def test_matches_pytorch(name, dtype, device):
    import torch
    fn, ref, shapes, kwargs = OPS[name]
    xs = _inputs(shapes, dtype, device)
    ts = [torch.tensor(to_np(x), requires_grad=True) for x in xs]
    out = fn(*xs, **kwargs)
    ref = getattr(torch.nn.functional, ref) if isinstance(ref, str) else ref
    tout = ref(*ts, **kwargs)
    assert out.shape == tuple(tout.shape)
    assert_close(out, tout.detach().numpy(), dtype, f"{name} forward")
    upstream = np.random.default_rng(3).standard_normal(out.shape)
    out.backward(backend.to_device(upstream.astype(dtype), device))
    tout.backward(torch.tensor(upstream.astype(dtype)))
    for x, t in zip(xs, ts):
        assert_close(x.grad, t.grad.numpy(), dtype, f"{name} gradient")


def test_conv_blocks_give_the_same_result(monkeypatch):
    """Small workspace limits force sample blocks and row bands; the result must not change."""
    x, w, b = _inputs([(3, 2, 9, 8), (4, 2, 3, 3), (4,)], "float64", "cpu")
    full = F.conv2d(x, w, b, stride=2, padding=1)
    full.sum().backward()
    grads = [t.grad.numpy().copy() for t in (x, w, b)]
    for limit in (2 * 9 * 4 * 2, 2 * 9 * 4):  # two samples' worth of rows ... one row band
        monkeypatch.setattr(conv_ops, "WORKSPACE_ELEMENTS", limit)
        for t in (x, w, b):
            t.grad = None
        out = F.conv2d(x, w, b, stride=2, padding=1)
        np.testing.assert_allclose(out.numpy(), full.numpy(), rtol=1e-12, atol=1e-12)
        out.sum().backward()
        for t, g in zip((x, w, b), grads):
            np.testing.assert_allclose(t.grad.numpy(), g, rtol=1e-12, atol=1e-12)


def test_conv_workspace_is_bounded_and_counted(monkeypatch):
    """The column matrix lives in the workspace bucket, one block at a time."""
    monkeypatch.setattr(conv_ops, "WORKSPACE_ELEMENTS", 4096)
    x = tm.randn(4, 8, 16, 16)
    w = tm.randn(8, 8, 3, 3, requires_grad=True)
    with memory.track() as t:
        y = F.conv2d(x, w, padding=1)
    rows = 4096 // (8 * 9 * 16)  # output rows per band of the column matrix
    block = 8 * 9 * rows * 16 * 4
    full_cols = 8 * 9 * 16 * 16 * 4 * 4
    padded = 8 * 18 * 18 * 4  # one sample's padded copy, shared by its bands
    product = 8 * rows * 16 * 4  # a band's matmul output, before it goes into y
    blocks = [e["bytes"] for e in t.timeline() if e["kind"] == "alloc" and e["bytes"] != y.nbytes]
    cols = [b for b in blocks if b % (8 * 9 * 16 * 4) == 0 and b != padded]  # C·kh·kw·OW floats a row
    # One registered column block per band of rows of each sample, none larger than the limit.
    assert len(cols) == 4 * -(-16 // rows) and max(cols) <= block < full_cols / 10, blocks
    # At the peak: the output (registered when made, filled band by band), one padded sample,
    # one column block and its product; every one of them counted.
    assert t.peak_delta() == y.nbytes + padded + block + product, memory.format_table(t.peak_by_bucket())
    # Saved for backward: only the input (x needs no gradient, so the weight is not kept),
    # nothing of the columns.
    assert memory.live_bytes("activation") == x.nbytes


def test_conv_errors_are_clear():
    with pytest.raises(ValueError, match="same C"):
        F.conv2d(tm.randn(1, 3, 5, 5), tm.randn(2, 4, 3, 3))
    with pytest.raises(ValueError, match="larger than"):
        F.conv2d(tm.randn(1, 1, 2, 2), tm.randn(1, 1, 3, 3))
    with pytest.raises(ValueError, match="stride"):
        F.conv2d(tm.randn(1, 1, 5, 5), tm.randn(1, 1, 3, 3), stride=(1, 2, 3))
    with pytest.raises(ValueError, match="nearest"):
        F.interpolate(tm.randn(1, 1, 2, 2), 2, mode="bilinear")


def test_max_pool_saves_one_byte_per_output():
    x = tm.randn(2, 3, 8, 8, requires_grad=True)
    y = F.max_pool2d(x, 2)
    assert memory.live_bytes("activation") == 2 * 3 * 4 * 4 and y.shape == (2, 3, 4, 4)


@requires_torch
def test_conv2d_layer_init_matches_pytorch_bounds():
    import torch
    # 64 output channels: the spread check below holds for any seed (5 biases miss the top fifth
    # of the range with probability 0.9^5 = 0.59; 64 with 0.9^64 = 0.001)
    layer = tm.nn.Conv2d(6, 64, 3, padding=1)
    ref = torch.nn.Conv2d(6, 64, 3, padding=1)
    bound = 1 / np.sqrt(6 * 9)
    for ours, theirs in ((layer.weight, ref.weight), (layer.bias, ref.bias)):
        assert ours.shape == tuple(theirs.shape)
        assert np.abs(ours.numpy()).max() <= bound
        assert np.abs(theirs.detach().numpy()).max() <= bound
        assert np.abs(ours.numpy()).max() > 0.8 * bound  # spread over the whole range


@requires_torch
def test_batchnorm2d_layer_matches_pytorch_over_steps(device):
    import torch
    ours = tm.nn.BatchNorm2d(3).to(device)
    ref = torch.nn.BatchNorm2d(3)
    rng = np.random.default_rng(0)
    for step in range(3):
        x = rng.standard_normal((4, 3, 5, 5)).astype(np.float32) * (step + 1) + step
        y = ours(tm.tensor(x, device=device))
        ty = ref(torch.tensor(x))
        assert_close(y, ty.detach().numpy(), "float32")
    assert_close(ours.running_mean, ref.running_mean.numpy(), "float32")
    assert_close(ours.running_var, ref.running_var.numpy(), "float32")
    assert ours.num_batches_tracked == int(ref.num_batches_tracked)
    ours.eval()
    ref.eval()
    x = rng.standard_normal((2, 3, 4, 4)).astype(np.float32)
    xt = tm.tensor(x, device=device, requires_grad=True)
    tt = torch.tensor(x, requires_grad=True)
    y, ty = ours(xt), ref(tt)
    assert_close(y, ty.detach().numpy(), "float32", "eval forward")
    y.sum().backward()
    ty.sum().backward()
    assert_close(xt.grad, tt.grad.numpy(), "float32", "eval input gradient")
    assert_close(ours.weight.grad, ref.weight.grad.numpy(), "float32", "eval weight gradient")


def test_batchnorm_skips_running_update_while_recomputing():
    bn = tm.nn.BatchNorm2d(2)
    x = tm.randn(4, 2, 3, 3) * 3 + 1
    y1 = bn(x)
    mean, var, count = bn.running_mean.copy(), bn.running_var.copy(), bn.num_batches_tracked
    with autograd.recomputing():
        y2 = bn(x)
    assert np.array_equal(bn.running_mean, mean) and np.array_equal(bn.running_var, var)
    assert bn.num_batches_tracked == count == 1
    assert np.array_equal(y1.numpy(), y2.numpy())  # recomputation reproduces the output
    bn(x)
    assert not np.array_equal(bn.running_mean, mean)


def test_batchnorm_state_dict_round_trip():
    bn = tm.nn.BatchNorm2d(2)
    bn(tm.randn(4, 2, 3, 3) * 2 + 5)
    fresh = tm.nn.BatchNorm2d(2)
    fresh.load_state_dict(bn.state_dict())
    assert np.array_equal(fresh.running_mean, bn.running_mean)
    assert np.array_equal(fresh.running_var, bn.running_var)
    assert fresh.num_batches_tracked == 1
    bn.eval()
    fresh.eval()
    x = tm.randn(1, 2, 3, 3)
    assert np.array_equal(fresh(x).numpy(), bn(x).numpy())

