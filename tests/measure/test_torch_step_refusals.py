"""measure_torch_step refuses what it cannot measure honestly, before running the step: a device
torch cannot name, an optimizer that updates tensors the model does not hold, a second measurement
while one runs. A good call after each refusal works."""
import pytest

from tinymem.measure.torch_step import measure_torch_step

pytestmark = pytest.mark.torch


def _sgd_linear(torch, n_in, n_out):
    lin = torch.nn.Linear(n_in, n_out)
    return lin, torch.optim.SGD(lin.parameters(), lr=0.1)  # plain SGD keeps no state


def _never_runs(ran):
    def step():
        ran.append(1)
        raise AssertionError("the step ran although the call should have been refused")
    return step


def test_a_device_torch_cannot_name_is_refused_naming_the_argument():
    import torch
    lin, opt = _sgd_linear(torch, 2, 2)
    ran = []
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'.*got 'xyz'"):
        measure_torch_step(_never_runs(ran), model=lin, optimizer=opt, device="xyz")
    assert ran == []
    assert measure_torch_step(lambda: None, model=lin, optimizer=opt, device="cpu").peak == 2 * 2 * 4 + 2 * 4
