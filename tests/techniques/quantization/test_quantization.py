"""quantize / dequantize / fake_quantize, the exact integer matmul, QuantizedLinear and PTQ,
and training with compressed saved activations."""
import numpy as np
import pytest
from conftest import requires_torch, to_np

import tinymem as tm
import tinymem.functional as F
from tinymem import backend, memory, models, nn
from tinymem.techniques import quantization as Q


def _x(device, shape=(16, 24), scale=3.0, seed=0):
    x = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    return backend.to_device(x, device)


# -- the affine map ----------------------------------------------------------------------------
@pytest.mark.parametrize("dtype,qscheme", [("quint8", "per_tensor_affine"), ("qint8", "per_tensor_affine"),
                                           ("quint8", "per_tensor_symmetric"), ("qint8", "per_tensor_symmetric")])
def test_round_trip_error_within_half_a_step_and_clamped_outside(device, dtype, qscheme):
    x = _x(device)
    lo, hi = Q.qrange(dtype)
    s, z = Q.qparams_from_minmax(x.min() * 0.5, x.max() * 0.5, qscheme, dtype, lo, hi)
    q = Q.quantize(x, s, z, dtype)
    assert q.dtype == Q.storage_dtype(dtype) and q.nbytes * 4 == x.nbytes
    back = to_np(Q.dequantize(q, s, z))
    xs, s0, z0 = to_np(x), float(s[0]), int(z[0])
    rmin, rmax = s0 * (lo - z0), s0 * (hi - z0)
    inside = (xs >= rmin) & (xs <= rmax)
    assert inside.any() and (~inside).any()
    assert np.abs(back - xs)[inside].max() <= s0 / 2 * (1 + 1e-5)
    np.testing.assert_allclose(back[xs > rmax], rmax, rtol=1e-6)
    np.testing.assert_allclose(back[xs < rmin], rmin, rtol=1e-6)


def test_per_channel_quantize_uses_one_scale_per_slice(device):
    x = _x(device, (4, 10)) * backend.to_device(np.array([[0.01], [1], [10], [100]], np.float32), device)
    obs = Q.PerChannelMinMaxObserver(ch_axis=0, dtype="qint8", qscheme="per_channel_symmetric")
    obs(x)
    s, z = obs.calculate_qparams()
    back = to_np(Q.dequantize(Q.quantize(x, s, z, "qint8", axis=0), s, z, axis=0))
    err = np.abs(back - to_np(x)).max(axis=1)
    assert np.all(err <= to_np(s) / 2 * (1 + 1e-4))
    with pytest.raises(ValueError, match="axis"):
        Q.quantize(x, s, z, "qint8")


def test_qrange_matches_pytorch_rules():
    assert Q.qrange("quint8") == (0, 255) and Q.qrange("qint8", True) == (-64, 63)
    assert Q.qrange("quint8", True) == (0, 127) and Q.qrange("qint8", False, -8, 7) == (-8, 7)
    assert Q.qrange("qint8", True, -8, 7) == (-4, 3)
    with pytest.raises(ValueError, match="contain 0"):
        Q.qrange("quint8", False, 1, 5)


@requires_torch
@pytest.mark.parametrize("per_channel", [False, True])
def test_fake_quantize_forward_and_gradient_equal_pytorch(per_channel):
    import torch
    x = _x("cpu", (6, 9))
    if per_channel:
        s, z = np.array([0.02, 0.05, 0.1, 0.2, 0.01, 0.03], np.float32), np.array([0, 10, 128, 200, 255, 3])
        ref = lambda t: torch.fake_quantize_per_channel_affine(  # noqa: E731
            t, torch.from_numpy(s), torch.from_numpy(z).int(), 0, 0, 255)
        axis = 0
    else:
        s, z = np.float32(0.03), 120
        ref = lambda t: torch.fake_quantize_per_tensor_affine(t, float(s), z, 0, 255)  # noqa: E731
        axis = None
    t = torch.from_numpy(x).requires_grad_()
    out_ref = ref(t)
    g = np.random.default_rng(1).standard_normal(x.shape).astype(np.float32)
    out_ref.backward(torch.from_numpy(g))
    ours = tm.tensor(x, requires_grad=True)
    out = Q.fake_quantize(ours, s, z, 0, 255, axis=axis)
    out.backward(tm.tensor(g))
    np.testing.assert_allclose(out.numpy(), out_ref.detach().numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(ours.grad.numpy(), t.grad.numpy())


def _exact_ties(scale):
    """Values whose x / scale is an exact half-integer in float32 (-6.5 .. 5.5)."""
    return ((np.arange(-6, 6) + 0.5).astype(np.float32) * np.float32(scale)).astype(np.float32)


@requires_torch
@pytest.mark.parametrize("dtype,lo,hi,zero_point", [("quint8", 0, 255, 3), ("quint8", 0, 255, 128),
                                                    ("qint8", -128, 127, -5), ("qint8", -128, 127, 0)])
def test_exact_ties_round_half_to_even_before_the_zero_point_as_fake_quantize(dtype, lo, hi, zero_point):
    # A tie is where the order matters: round(x / s) + z and round(x / s + z) differ by one step
    # at half of the ties when z is odd (torch.quantize_per_tensor takes the second order).
    import torch
    scale = 0.25  # a power of two: x / s and x * (1 / s) are the same exact half-integers
    x = _exact_ties(scale)
    ours = Q.quantize(x, scale, zero_point, dtype).astype(np.int64)
    np.testing.assert_array_equal(ours, np.clip(np.rint(x / np.float32(scale)).astype(np.int64) + zero_point, lo, hi))
    fq = torch.fake_quantize_per_tensor_affine(torch.from_numpy(x), scale, zero_point, lo, hi).numpy()
    np.testing.assert_array_equal(ours, np.rint(fq / scale).astype(np.int64) + zero_point)


@pytest.mark.parametrize("dtype,zero_point", [("quint8", 3), ("qint8", -5)])
def test_exact_ties_equal_onnx_quantize_linear(dtype, zero_point):
    """The edge runtime computes the same codes, ties included (per tensor and per channel)."""
    pytest.importorskip("onnxruntime")
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    elem = TensorProto.UINT8 if dtype == "quint8" else TensorProto.INT8
    np_dtype = np.uint8 if dtype == "quint8" else np.int8
    scales = np.array([0.25, 0.5, 0.125], np.float32)
    x = np.stack([_exact_ties(s) for s in scales], axis=1)  # (12, 3): channel c has ties of scales[c]
    zps = np.array([zero_point, zero_point + 2, zero_point - 1], np_dtype)
    cases = [(scales[:1].reshape(()), zps[:1].reshape(()), None), (scales, zps, 1)]
    for s, z, axis in cases:
        node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], **({} if axis is None else {"axis": axis}))
        graph = helper.make_graph(
            [node], "q", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
            [helper.make_tensor_value_info("q", elem, x.shape)],
            [helper.make_tensor("s", TensorProto.FLOAT, s.shape, s.reshape(-1).tolist()),
             helper.make_tensor("z", elem, z.shape, z.reshape(-1).tolist())])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 7
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = session.run(None, {"x": x})[0]
        ours = Q.quantize(x, s, z.astype(np.int64), dtype, axis=axis)
        np.testing.assert_array_equal(ours, expected)
        onnx.checker.check_model(model)


def test_fake_quantize_gradient_is_straight_through(device):
    x = tm.tensor(backend.to_device(np.linspace(-3, 3, 61, dtype=np.float32), device), requires_grad=True)
    Q.fake_quantize(x, 0.01, 128, 0, 255).sum().backward()
    xs = to_np(x.data)
    expected = ((np.rint(xs / np.float32(0.01)) + 128 >= 0) & (np.rint(xs / np.float32(0.01)) + 128 <= 255))
    np.testing.assert_array_equal(to_np(x.grad.data), expected.astype(np.float32))
    assert 0 < expected.sum() < expected.size


# -- the exact integer matmul ------------------------------------------------------------------
@pytest.mark.parametrize("k", [1, 1024, 1025, 3000])
def test_int_matmul_equals_int64_reference(device, k):
    rng = np.random.default_rng(k)
    a = rng.integers(-128, 128, (5, k)).astype(np.int8)
    b = rng.integers(-128, 128, (k, 7)).astype(np.int8)
    a[0], b[:, 0] = -128, -128  # the worst case: every partial sum at its largest magnitude
    out = Q.int_matmul(backend.to_device(a, device), backend.to_device(b, device))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(to_np(out), a.astype(np.int64) @ b.astype(np.int64))


def test_float32_accumulation_is_inexact_beyond_the_bound():
    # Why int_matmul chunks K: adding odd products of 127·127 one by one in float32 goes wrong
    # once the running sum passes 2**24 (K > 1040). A BLAS GEMM splits the sum over SIMD lanes
    # and may stay exact by luck at this size; the K <= 1024 bound is what guarantees it.
    k = 4096
    a = np.full((1, k), 127, np.int8)
    b = np.full((k, 1), 127, np.int8)
    products = (a[0].astype(np.float32) * b[:, 0].astype(np.float32))
    running = np.cumsum(products, dtype=np.float32)
    exact = a.astype(np.int64) @ b.astype(np.int64)
    assert exact[0, 0] > 2 ** 24 and int(running[-1]) != exact[0, 0]
    assert int(running[1023]) == 1024 * 127 * 127
    np.testing.assert_array_equal(Q.int_matmul(a, b), exact)


# -- QuantizedLinear and post-training quantization ---------------------------------------------
@pytest.mark.parametrize("per_channel", [False, True])
def test_quantized_linear_close_to_float_and_four_times_smaller(device, per_channel):
    tm.manual_seed(0)
    model = nn.Sequential(nn.Linear(48, 40, device=device))
    x = _x(device, (32, 48), 1.0)
    ref = to_np(model(tm.tensor(x, device=device)).data)
    before = memory.live_bytes("parameter")
    float_weight = model[0].weight.nbytes
    Q.quantize_model(model, [x], Q.MinMaxObserver, per_channel=per_channel)
    qlin = model[0]
    assert isinstance(qlin, Q.QuantizedLinear) and qlin.weight.dtype == np.int8
    assert float_weight == 4 * qlin.weight.nbytes
    after = memory.live_bytes("parameter")
    # int8 weight + fp32 bias + scales + int32 weight column sums, against fp32 weight + bias.
    expected = before - float_weight + qlin.weight.nbytes + qlin.weight_scale.nbytes + qlin.weight_colsum.nbytes
    assert after == expected, memory.format_table(memory.LEDGER.by_bucket())
    out = to_np(qlin(tm.tensor(x, device=device)).data)
    # Error budget: half an input step times sum|w| plus half a weight step times sum|x|.
    w = to_np(model[0].weight.data).astype(np.float64) * to_np(qlin.weight_scale)[:, None]
    bound = qlin.input_scale / 2 * np.abs(w).sum(1) + to_np(qlin.weight_scale) / 2 * np.abs(to_np(x)).sum(1, keepdims=True)
    assert np.all(np.abs(out - ref) <= bound * 1.01 + 1e-5)


def test_quantized_linear_matches_integer_reference():
    tm.manual_seed(1)
    model = nn.Sequential(nn.Linear(20, 6, device="cpu"))  # the reference is NumPy integer arithmetic
    x = _x("cpu", (5, 20), 1.0)
    Q.quantize_model(model, [x], Q.MinMaxObserver)
    q = model[0]
    qx = Q.quantize(x, q.input_scale, q.input_zero_point, "quint8").astype(np.int64)
    acc = (qx - q.input_zero_point) @ q.weight.data.astype(np.int64).T
    expected = (acc * np.float64(q.input_scale) * q.weight_scale.astype(np.float64) + q.bias.data).astype(np.float32)
    np.testing.assert_allclose(q(tm.tensor(x, device="cpu")).numpy(), expected, rtol=1e-6, atol=1e-6)


def test_prepare_convert_keep_layer_order_and_reject_bare_linear():
    model = models.MLP([8, 6, 4])
    Q.prepare(model, Q.HistogramObserver)
    assert [type(m).__name__ for m in model] == ["ObservedLinear", "ReLU", "ObservedLinear"]
    Q.calibrate(model, [np.ones((3, 8), np.float32)])
    Q.convert(model)
    assert [type(m).__name__ for m in model] == ["QuantizedLinear", "ReLU", "QuantizedLinear"]
    with pytest.raises(TypeError, match="Sequential"):
        Q.prepare(nn.Linear(2, 2))
    with pytest.raises(ValueError, match="no batches"):
        Q.calibrate(models.MLP([2, 2]), [])


def test_qat_trains_through_fake_quantize_and_converts():
    tm.manual_seed(0)
    x = _x("cpu", (64, 8), 1.0)
    y = (x[:, 0] > 0).astype(np.int64)
    model = Q.prepare_qat(models.MLP([8, 16, 2]))
    opt = tm.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(30):
        loss = F.cross_entropy(model(tm.tensor(x)), tm.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    assert losses[-1] < 0.5 * losses[0]
    model.eval()
    fq = model(tm.tensor(x)).numpy()
    Q.convert_qat(model)
    assert isinstance(model[0], Q.QuantizedLinear)
    np.testing.assert_allclose(model(tm.tensor(x)).numpy(), fq, atol=0.05)


# -- compressed saved activations -----------------------------------------------------------------
@pytest.mark.parametrize("bits", [8, 4, 2])
def test_compress_round_trip_within_one_step(device, bits):
    x = _x(device, (33, 17))
    c = Q.compress(x, bits, group_size=64, keep_sign=False)
    back = to_np(Q.decompress(c))
    assert back.shape == x.shape and back.dtype == np.float32
    groups = np.concatenate([to_np(x).ravel(), np.full(-x.size % 64, to_np(x).ravel()[-1])]).reshape(-1, 64)
    step = (groups.max(1) - groups.min(1)) / (2 ** bits - 1)
    err = np.abs(np.concatenate([back.ravel(), np.zeros(-x.size % 64)]) - groups.ravel()).reshape(-1, 64)[:, :]
    err.ravel()[x.size:] = 0
    assert np.all(err.max(1) <= step / 2 * (1 + 1e-5) + 1e-7)
    assert c.codes.nbytes == -(-x.size // 64) * 64 * bits // 8


@pytest.mark.parametrize("bits", [4, 2])
def test_stochastic_rounding_is_unbiased(device, bits):
    x = _x(device, (8, 32), 1.0)
    n = 2000
    total = np.zeros(x.shape)
    for _ in range(n):
        total += to_np(Q.decompress(Q.compress(x, bits, 32, stochastic=True, keep_sign=False)))
    step = (to_np(x).max() - to_np(x).min()) / (2 ** bits - 1)
    # Each sample errs by at most one step, so the mean of n errs by ~step/(2·sqrt(n)) (std).
    err = np.abs(total / n - to_np(x))
    assert err.max() < 5 * step / (2 * np.sqrt(n))
    nearest = np.abs(to_np(Q.decompress(Q.compress(x, bits, 32, keep_sign=False))) - to_np(x))
    assert err.mean() < 0.25 * nearest.mean()


@pytest.mark.parametrize("bits", [8, 4, 2])
def test_keep_sign_preserves_the_relu_mask(device, bits):
    y = backend.array_module(device).maximum(_x(device, (16, 64), 0.5), 0)
    tiny = to_np(y)
    plain = to_np(Q.decompress(Q.compress(y, bits, 64, keep_sign=False)))
    kept = to_np(Q.decompress(Q.compress(y, bits, 64, stochastic=bits < 8)))
    assert ((plain > 0) != (tiny > 0)).any()  # rounding to nearest loses small positives
    np.testing.assert_array_equal(kept > 0, tiny > 0)


def _mlp_step(bits, device="cpu", batch=64):
    tm.manual_seed(0)
    model = models.MLP([64, 256, 256, 10], device=device)
    x = tm.tensor(_x(device, (batch, 64), 1.0), device=device)
    y = tm.tensor(np.arange(batch) % 10, device=device)
    with memory.track(measure=False) as t:
        if bits == 32:
            loss = F.cross_entropy(model(x), y)
        else:
            with Q.compress_saved_activations(bits) as ctx:
                loss = F.cross_entropy(model(x), y)
        saved = memory.live_bytes("activation")
        loss.backward()
    grads = [to_np(p.grad.data) for p in model.parameters()]
    return saved, grads, t, (ctx.stats if bits != 32 else None)


@pytest.mark.parametrize("bits,ratio", [(8, 0.27), (4, 0.15), (2, 0.085)])
def test_compressed_activations_shrink_the_ledger(device, bits, ratio):
    saved32, g32, _, _ = _mlp_step(32, device)
    saved, g, t, stats = _mlp_step(bits, device)
    table = memory.format_table(t.max_by_bucket(), "max per bucket")
    assert saved <= ratio * saved32, table
    # Exactly what the hook registered, plus the int64 targets cross_entropy keeps as they are.
    assert saved == stats["compressed_bytes"] + 8 * 64, table
    assert memory.live_bytes("activation") == 0, table
    rel = [np.linalg.norm(a - b) / np.linalg.norm(b) for a, b in zip(g, g32)]
    # Stochastic rounding is unbiased but noisy: one step of 2-bit codes is as large as the signal.
    assert max(rel) < {8: 0.02, 4: 0.3, 2: 1.5}[bits], rel


def test_compression_skips_parameters_integers_and_repeats():
    model = models.MLP([8, 8, 3])
    x = tm.tensor(_x("cpu", (4, 8), 1.0))
    with Q.compress_saved_activations(8) as ctx:
        loss = F.cross_entropy(model(x), tm.tensor(np.array([0, 1, 2, 0])))
    # x, ReLU output (saved by the ReLU and the next Linear: compressed once), probabilities.
    assert ctx.stats["tensors"] == 3
    loss.backward()
    with pytest.raises(ValueError, match="bits"):
        Q.compress_saved_activations(3)
