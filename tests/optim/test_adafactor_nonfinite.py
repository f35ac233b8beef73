"""Adafactor given one inf gradient element: which weights turn NaN, on the CPU, on a device (the
stand-in) and in torch.optim.Adafactor.

Before: a vector's update is NaN at that element; the CPU's Python max(1, NaN) kept the clipping
divisor at 1 (one NaN weight, as PyTorch) while the device's maximum gave NaN (every weight NaN).
And a matrix's running row mean was inf on both where PyTorch's lerp makes it NaN: 6 NaN weights
of 12 and 6 of them moved by g / eps (about 1e7 times the step), where PyTorch makes all 12 NaN."""
import numpy as np
import pytest
from conftest import requires_torch

from tinymem import backend, optim
from tinymem.nn import Parameter

CASES = {"vector": ((6,), (2,)), "matrix": ((3, 4), (1, 2)), "3-d": ((2, 3, 4), (0, 1, 2))}


def _problem(shape, at, steps=2):
    """A weight and ``steps`` gradients; the second has one inf element (the first is clean, so
    the optimizer's state holds finite values when the inf arrives)."""
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(shape).astype(np.float32) for _ in range(steps)]
    grads[1][at] = np.inf
    return rng.standard_normal(shape).astype(np.float32), grads


def _tinymem(w0, grads, device):
    p = Parameter(backend.to_device(w0.copy(), device))
    opt = optim.Adafactor([p])
    with np.errstate(invalid="ignore"):
        for g in grads:
            p.grad = backend.to_device(g.copy(), device)
            opt.step()
    return p.numpy()


@pytest.mark.parametrize("case", list(CASES))
def test_one_inf_gradient_element_gives_the_same_weights_on_a_device_as_on_the_cpu(case, standin):
    w0, grads = _problem(*CASES[case])
    cpu, dev = _tinymem(w0, grads, "cpu"), _tinymem(w0, grads, "cuda")
    assert np.isnan(cpu).any()
    assert np.array_equal(cpu.view(np.uint32), dev.view(np.uint32)), (
        f"{int(np.isnan(cpu).sum())} NaN weights on the CPU, {int(np.isnan(dev).sum())} on the device")


@requires_torch
@pytest.mark.parametrize("case, nan_weights", [("vector", 1), ("matrix", 12), ("3-d", 12)])
def test_one_inf_gradient_element_turns_the_weights_pytorch_turns_nan(case, nan_weights):
    import torch
    w0, grads = _problem(*CASES[case])
    ours = _tinymem(w0, grads, "cpu")
    p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
    opt = torch.optim.Adafactor([p])
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        opt.step()
    ref = p.detach().numpy()
    assert np.isnan(ref).sum() == nan_weights  # the 3-d case: the inf's own (3, 4) slice only
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    finite = ~np.isnan(ref)
    np.testing.assert_allclose(ours[finite], ref[finite], rtol=1e-6, atol=1e-7)
