"""Kernel-launch and host-sync budgets, held on the CuPy stand-in.

On a GPU a kernel launch costs microseconds whatever its size, and a host sync (reading a
device value on the host: ``float()``, ``bool()``, ``.item()``, ``asnumpy``) stalls the host
until the device has finished everything queued before it. The stand-in counts both
(``standin_cupy.counting``); these tests hold the budgets, and print where each launch and sync
came from when one is broken.
"""
import numpy as np
import pytest

import standin_cupy as sc
import tinymem as tm
from tinymem import backend, nn, optim, random
from tinymem.models import MLP
from tinymem.techniques.precision import (GradScaler, bfloat16_bits_to_float32, float16_to_float32,
                                          float32_to_bfloat16_bits, float32_to_float16, half, round_to_bfloat16,
                                          round_to_float16)


@pytest.fixture
def cuda(standin):
    return standin


def _within(counts, launches=None, syncs=None, generators=None, what=""):
    for name, limit in (("launches", launches), ("syncs", syncs), ("generators", generators)):
        if limit is not None:
            assert getattr(counts, name) <= limit, f"{what}: {name} over budget ({limit}): {counts.report()}"


def _values(xp, n=4099):
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x[:4] = [np.nan, np.inf, -1e-40, 70000.0]
    return xp.asarray(x)


CODECS = [("fp16 encode", float32_to_float16, np.float32), ("fp16 decode", float16_to_float32, np.float16),
          ("fp16 round", round_to_float16, np.float32), ("bf16 encode", float32_to_bfloat16_bits, np.float32),
          ("bf16 decode", bfloat16_bits_to_float32, np.uint16), ("bf16 round", round_to_bfloat16, np.float32)]


@pytest.mark.parametrize("name, codec, dtype", CODECS, ids=[c[0] for c in CODECS])
def test_half_codecs_take_at_most_two_launches_and_no_sync(cuda, name, codec, dtype):
    x = _values(cuda)
    x = x.astype(np.float16) if dtype == np.float16 else x.view(np.uint16)[::2].copy() if dtype == np.uint16 else x
    with sc.counting() as counts, np.errstate(over="ignore"):  # 70000 overflows float16
        out = codec(x)
    _within(counts, launches=2, syncs=0, what=name)
    with np.errstate(all="ignore"):
        expected = codec(backend.to_numpy(x))
    assert np.array_equal(backend.to_numpy(out).view(np.uint8), expected.view(np.uint8)), name


def _params(device, shapes, seed=0):
    rng = np.random.default_rng(seed)
    params = [nn.Parameter(tm.tensor(rng.standard_normal(s).astype(np.float32), device=device)) for s in shapes]
    for p in params:
        p.grad = tm.tensor(rng.standard_normal(p.shape).astype(np.float32), device=device)
    return params


SHAPES = [(64, 96), (96,), (5000,), (4096,), (3, 40, 50)]


@pytest.mark.parametrize("variant", [{}, {"amsgrad": True}, {"decoupled_weight_decay": True}],
                         ids=["adam", "amsgrad", "adamw"])
def test_adam_takes_at_most_two_launches_per_parameter_and_no_sync(cuda, variant):
    steps = 3
    device_params, cpu_params = _params("cuda", SHAPES), _params("cpu", SHAPES)
    device_opt = optim.Adam(device_params, lr=1e-2, weight_decay=0.1, **variant)
    cpu_opt = optim.Adam(cpu_params, lr=1e-2, weight_decay=0.1, **variant)
    with sc.counting() as counts:
        for _ in range(steps):
            device_opt.step()
    for _ in range(steps):
        cpu_opt.step()
    # the first step makes the state (one fill per buffer), not counted against the step
    buffers = (3 if variant.get("amsgrad") else 2) * len(SHAPES)
    _within(counts, launches=2 * len(SHAPES) * steps + buffers, syncs=0, what="Adam")
    for d, c in zip(device_params, cpu_params):
        np.testing.assert_allclose(d.numpy(), c.numpy(), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("qmap", ["dynamic", "linear"])
def test_adam8bit_takes_at_most_six_launches_per_parameter_and_no_sync(cuda, qmap):
    """And its kernels' bodies give the CPU's chunked step: weights, codes and scales."""
    device_params, cpu_params = _params("cuda", SHAPES), _params("cpu", SHAPES)
    device_opt, cpu_opt = (optim.Adam8bit(ps, lr=1e-2, weight_decay=0.01, block_size=256, qmap=qmap)
                           for ps in (device_params, cpu_params))
    device_opt.step()  # state, maps and tables made once
    with sc.counting() as counts:
        device_opt.step()
    _within(counts, launches=6 * len(SHAPES), syncs=0, what="Adam8bit")
    device_opt.step()
    for _ in range(3):
        cpu_opt.step()
    for d, c in zip(device_params, cpu_params):
        np.testing.assert_allclose(d.numpy(), c.numpy(), rtol=1e-6, atol=1e-7)
        for name, value in cpu_opt.state[c].items():
            if hasattr(value, "shape"):
                assert np.array_equal(backend.to_numpy(device_opt.state[d][name]), value), name


def _mlp_step(device, scaler=None, dtype="float32", steps=2):
    tm.manual_seed(0)
    model = MLP([32, 64, 64, 10], device=device)
    opt = optim.Adam(model.parameters(), lr=1e-3)
    if dtype != "float32":
        model, opt = half(model, opt, dtype)
    x = tm.tensor(np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32), device=device)
    y = tm.tensor(np.arange(16) % 10, device=device)
    counts_per_step = []
    for _ in range(steps):
        with sc.counting() as counts:
            opt.zero_grad()
            loss = tm.functional.cross_entropy(model(x), y)
            (scaler.scale(loss) if scaler else loss).backward()
            if scaler:
                scaler.step(opt)
                scaler.update()
            else:
                opt.step()
        counts_per_step.append(counts)
    return counts_per_step[-1], model


def test_an_fp32_mlp_adam_step_makes_no_host_sync(cuda):
    counts, _ = _mlp_step("cuda")
    _within(counts, syncs=0, what="fp32 MLP + Adam step")


def test_an_fp16_mlp_step_with_grad_scaler_syncs_once_per_step_not_per_parameter(cuda):
    counts, model = _mlp_step("cuda", scaler=GradScaler(), dtype="float16")
    assert len(list(model.parameters())) == 6
    _within(counts, syncs=1, what="fp16 MLP + Adam + GradScaler step")
    assert counts.syncs == 1, counts.report()  # the one read of the inf/NaN flag


def test_dropout_builds_no_generator_per_call(cuda):
    x = tm.tensor(np.ones((64, 64), np.float32), device="cuda")
    tm.functional.dropout(x, 0.5, training=True)
    with sc.counting() as counts:
        for _ in range(5):
            tm.functional.dropout(x, 0.5, training=True)
    _within(counts, generators=0, syncs=0, what="dropout")


def test_embedding_cross_entropy_and_adafactor_make_no_host_sync(cuda):
    """Their bound checks and RMS read nothing on the host; on a device an index or target out of
    range gives NaN (a device cannot raise without a sync), where the CPU raises IndexError."""
    table = tm.tensor(np.arange(12, dtype=np.float32).reshape(4, 3), device="cuda", requires_grad=True)
    logits = tm.tensor(np.zeros((3, 4), np.float32), device="cuda")
    with sc.counting() as counts:
        rows = tm.functional.embedding(tm.tensor(np.array([3, 0, 4, -1]), device="cuda"), table)
        loss = tm.functional.cross_entropy(logits, tm.tensor(np.array([0, 4, -1]), device="cuda"), reduction="none")
    _within(counts, syncs=0, what="embedding and cross_entropy")
    rows, loss = backend.to_numpy(rows.data), backend.to_numpy(loss.data)
    assert rows[:2].tolist() == [[9, 10, 11], [0, 1, 2]] and np.isnan(rows[2:]).all()
    assert np.isclose(loss[0], np.log(4)) and np.isnan(loss[1:]).all()
    w = nn.Parameter(tm.tensor(np.ones((8, 6), np.float32), device="cuda"))
    b = nn.Parameter(tm.tensor(np.ones(6, np.float32), device="cuda"))
    opt = optim.Adafactor([w, b])
    for p in (w, b):
        p.grad = tm.tensor(np.full(p.shape, 0.5, np.float32), device="cuda")
    opt.step()
    with sc.counting() as counts:
        opt.step()
    _within(counts, syncs=0, what="Adafactor")


def test_out_of_range_rows_give_nan_gradients_on_a_device_and_valid_rows_exact_ones(cuda):
    """A target or index out of range gives a NaN loss on a device; its gradient is NaN as well
    (it was the pull towards the clipped class, and an embedding's wrapped into a wrong row by
    CuPy's scatter, the stand-in raising IndexError), so a GradScaler skips the step; valid
    rows' gradients equal the CPU's. No host sync in backward either."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((4, 5)).astype(np.float32)
    grads = []
    for device, target in (("cpu", [1, 0, 4, 2]), ("cuda", [1, 0, 7, 2])):
        logits = tm.tensor(z, device=device, requires_grad=True)
        loss = tm.functional.cross_entropy(logits, tm.tensor(np.array(target), device=device), reduction="sum")
        with sc.counting() as counts:
            loss.backward()
        grads.append(backend.to_numpy(logits.grad.data))
    _within(counts, syncs=0, what="cross_entropy's backward")
    assert np.array_equal(grads[0][[0, 1, 3]], grads[1][[0, 1, 3]]) and np.isnan(grads[1][2]).all()
    table = tm.tensor(np.ones((4, 3), np.float32), device="cuda", requires_grad=True)
    rows = tm.functional.embedding(tm.tensor(np.array([1, 6, 1]), device="cuda"), table)
    with sc.counting() as counts:
        rows.sum().backward()
    _within(counts, syncs=0, what="embedding's backward")
    grad = backend.to_numpy(table.grad.data)
    assert grad[1].tolist() == [2, 2, 2] and grad[0].tolist() == [0, 0, 0] and np.isnan(grad[3]).all()
    weight = nn.Parameter(tm.tensor(np.ones((4, 3), np.float32), device="cuda"))
    weight.grad = table.grad.data
    opt, scaler = optim.SGD([weight], lr=1.0), GradScaler()
    scaler.step(opt)
    assert scaler.found_inf(opt) and backend.to_numpy(weight.data).tolist() == np.ones((4, 3)).tolist()
