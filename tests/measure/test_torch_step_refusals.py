"""measure_torch_step refuses what it cannot measure honestly, before running the step: a device
torch cannot name, an optimizer that updates tensors the model does not hold, a second measurement
while one runs. A good call after each refusal works."""
import threading

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


def test_an_optimizer_of_tensors_the_model_does_not_hold_is_refused():
    import torch
    lin, opt = _sgd_linear(torch, 2, 2)
    other, other_opt = _sgd_linear(torch, 3, 5)  # another model's optimizer: its 80 bytes are in no bucket
    extra = torch.nn.Parameter(torch.zeros(7))  # a tensor the optimizer updates beside the model's
    mixed = torch.optim.SGD([*lin.parameters(), extra], lr=0.1)
    ran = []
    with pytest.raises(ValueError, match=r"optimizer= updates 2 tensors \(80 B\) that model= does not hold"):
        measure_torch_step(_never_runs(ran), model=lin, optimizer=other_opt)
    with pytest.raises(ValueError, match=r"optimizer= updates 1 tensors \(28 B\) that model= does not hold"):
        measure_torch_step(_never_runs(ran), model=lin, optimizer=mixed)
    assert ran == []
    both = torch.nn.ModuleList([lin, torch.nn.ParameterList([extra])])
    assert measure_torch_step(lambda: None, model=both, optimizer=mixed).baseline == 24 + 28
    frozen = torch.optim.SGD([lin.weight], lr=0.1)  # an optimizer of part of the model is fine
    assert measure_torch_step(lambda: None, model=lin, optimizer=frozen).baseline == 24


def test_a_second_measurement_while_one_runs_is_refused_and_the_first_is_unharmed():
    import torch
    lin, opt = _sgd_linear(torch, 2, 2)
    inside, release, results = threading.Event(), threading.Event(), {}

    def waits():  # the measured step of the first measurement, held open until the second is tried
        inside.set()
        release.wait(30)

    def first():
        results["first"] = measure_torch_step(waits, model=lin, optimizer=opt, steps=1)

    thread = threading.Thread(target=first)
    thread.start()
    ran = []
    try:
        assert inside.wait(30)
        other, other_opt = _sgd_linear(torch, 3, 5)
        # steps=3: a step that ran would run before any profiler opened (and fail the test, not crash it).
        with pytest.raises(RuntimeError, match="another measure_torch_step is running"):
            measure_torch_step(_never_runs(ran), model=other, optimizer=other_opt, steps=3)
    finally:
        release.set()
        thread.join()
    assert ran == []
    assert results["first"].peak == results["first"].baseline == 24
    assert measure_torch_step(lambda: None, model=lin, optimizer=opt).peak == 24


def test_a_device_that_holds_none_of_the_models_parameters_is_refused():
    import torch
    on_meta = torch.nn.Linear(2, 2, device="meta")  # as a model on the GPU measured with device='cpu'
    opt = torch.optim.SGD(on_meta.parameters(), lr=0.1)
    ran = []
    with pytest.raises(ValueError, match="model= has no parameter on device='cpu' .its parameters are on meta."):
        measure_torch_step(_never_runs(ran), model=on_meta, optimizer=opt, device="cpu")
    assert ran == []
    lin, opt = _sgd_linear(torch, 2, 2)
    assert measure_torch_step(lambda: None, model=lin, optimizer=opt, device="cpu").peak == 24


def test_exporting_a_step_that_allocated_nothing_is_refused_in_its_own_terms(tmp_path):
    import torch
    lin, opt = _sgd_linear(torch, 2, 2)
    r = measure_torch_step(lambda: None, model=lin, optimizer=opt)
    assert (r.peak, r.baseline, r.events, r.op_at_peak) == (24, 24, [], "(step start)")
    for export in (r.export_page, r.export_snapshot):
        with pytest.raises(ValueError, match=r"the measured step allocated nothing \(peak = baseline = 24 B\)"):
            export(tmp_path / "step.out")
    assert list(tmp_path.iterdir()) == []
