"""measure_torch_step against allocations whose sizes and order are known, and steps derived by hand."""
import json
import pickle
import re

import pytest

from tinymem.measure import torch_profile, torch_step
from tinymem.measure.torch_step import measure_torch_step

pytestmark = pytest.mark.torch


def _sgd_linear(torch, n_in, n_out):
    lin = torch.nn.Linear(n_in, n_out)
    return lin, torch.optim.SGD(lin.parameters(), lr=0.1)  # plain SGD keeps no state


def _adamw_step(torch, *middle):
    """An AdamW step of Linear(8, 32), ``middle``, Linear(32, 4) on a batch of 8: (step, its objects)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), *middle, torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(8, 8)

    def step():
        model(x).square().mean().backward()
        opt.step()
        opt.zero_grad()

    return step, dict(model=model, optimizer=opt, inputs=(x,))


def test_known_allocations_give_the_known_peak_and_op():
    import torch
    lin, opt = _sgd_linear(torch, 1, 1)  # 8 bytes of parameters: the baseline

    def step():
        a = torch.empty(1000, dtype=torch.uint8)
        b = torch.empty(3000, dtype=torch.uint8)  # 4000 live
        del a  # 3000
        c = torch.empty(500, dtype=torch.uint8)  # 3500
        d = torch.ones(2000, dtype=torch.uint8)  # 5500: the peak, made by aten::ones
        del b, c, d
        e = torch.empty(5000, dtype=torch.uint8)  # 5000: below the peak
        return e

    r = measure_torch_step(step, model=lin, optimizer=opt)
    assert r.baseline == 8
    assert r.peak == 8 + 5500
    assert r.op_at_peak == "aten::ones" and r.node_at_peak is None and r.phase_at_peak == "forward"
    assert r.buckets["parameter"] == 8 and r.buckets["temporary"] == 5500
    assert sum(r.buckets.values()) == r.peak
    # The events replay to the same peak; the returned tensor is kept to the end of the step.
    total, totals = 8, []
    for _, nbytes, _, _, _ in r.events:
        total += nbytes
        totals.append(total)
    assert max(totals) == r.peak and totals[-1] == 8 + 5000


def test_linear_mse_step_peaks_where_derived_by_hand():
    import torch
    lin, opt = _sgd_linear(torch, 16, 8)
    x, y = torch.randn(4, 16), torch.randn(4, 8)

    def step():
        loss = torch.nn.functional.mse_loss(lin(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()

    # The 0-d loss keeps the (4, 8) buffer mse_loss reduced in place: 128 bytes.
    assert torch.nn.functional.mse_loss(torch.zeros(4, 8), y).untyped_storage().nbytes() == 128
    r = measure_torch_step(step, model=lin, optimizer=opt, inputs=(x, y))
    params, inputs = (16 * 8 + 8) * 4, (4 * 16 + 4 * 8) * 4
    # In AddmmBackward0, once it has made the bias gradient: the gradient of the output (4x8)
    # from MseLossBackward0, the weight's (8x16) and the bias's (8) gradients are in flight;
    # the loss's buffer and backward's 4-byte seed (ones_like) are temporaries. The output
    # itself, saved by mse_loss, was freed when MseLossBackward0 finished.
    in_flight = (4 * 8 + 8 * 16 + 8) * 4
    assert r.baseline == params + inputs
    assert r.peak == params + inputs + in_flight + 128 + 4
    assert (r.phase_at_peak, r.node_at_peak, r.op_at_peak) == ("backward", "AddmmBackward0", "aten::sum")
    assert {b: n for b, n in r.buckets.items() if n} == {
        "parameter": params, "input": inputs, "in_flight": in_flight, "temporary": 132}


def test_adamw_mlp_buckets_hold_the_known_state_and_sum_to_the_peak():
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    opt = torch.optim.AdamW(model.parameters())  # for-loop AdamW, the CPU default
    x, y = torch.randn(16, 32), torch.randn(16, 8)

    def step():
        out = model(x)
        torch.nn.functional.mse_loss(out, y).backward()
        opt.step()
        opt.zero_grad()

    r = measure_torch_step(step, model=model, optimizer=opt, inputs=(x, y))
    param_bytes = sum(p.numel() * 4 for p in model.parameters())
    step_tensors = 4 * len(list(model.parameters()))  # AdamW's float32 step count per parameter
    assert sum(r.buckets.values()) == r.peak
    assert r.buckets["parameter"] == param_bytes
    assert r.buckets["optimizer"] == 2 * param_bytes + step_tensors  # exp_avg and exp_avg_sq
    assert r.baseline == 3 * param_bytes + step_tensors + (16 * 32 + 16 * 8) * 4
    # The for-loop update of the largest parameter (32x64) holds sqrt(v) and the step's quotient.
    assert r.phase_at_peak == "optimizer"
    assert r.buckets["gradient"] == param_bytes and r.buckets["temporary"] >= 2 * 32 * 64 * 4


def test_cross_entropy_backward_holds_two_gradients_of_the_logits_beside_the_saved_log_softmax():
    import torch
    torch.manual_seed(0)
    n, v = 64, 300
    model = torch.nn.Linear(16, v, bias=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(n, 16), torch.randint(0, v, (n,))

    def step():
        logits = model(x)
        torch.nn.functional.cross_entropy(logits, y).backward()
        opt.step()
        opt.zero_grad()
        return logits  # the caller keeps the logits

    r = measure_torch_step(step, model=model, optimizer=opt, inputs=(x, y))
    assert (r.phase_at_peak, r.node_at_peak) == ("backward", "LogSoftmaxBackward0")
    assert r.buckets["in_flight"] == 2 * 4 * n * v  # dlogp from nll_loss, dlogits being written
    assert r.buckets["activation"] == 4 * n * v  # log_softmax's saved output
    assert r.buckets["temporary"] >= 4 * n * v  # the logits the caller holds
    largest = r.top(4)
    assert [row["bytes"] for row in largest] == [4 * n * v] * 4 and r.top(5)[4]["bytes"] < 4 * n * v
    assert sorted((row["bucket"], row["op"]) for row in largest) == [
        ("activation", "aten::_log_softmax"), ("in_flight", "aten::_log_softmax_backward_data"),
        ("in_flight", "aten::nll_loss_backward"), ("temporary", "aten::mm")]


def test_the_marking_hooks_move_no_byte(monkeypatch):
    import torch
    step, kwargs = _adamw_step(torch, torch.nn.GELU(), torch.nn.LayerNorm(32))
    marked = measure_torch_step(step, **kwargs)

    class NoHooks:
        def __init__(self, *args):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(torch_step, "StepHooks", NoHooks)
    plain = measure_torch_step(step, **kwargs)
    assert plain.peak == marked.peak and plain.baseline == marked.baseline
    assert marked.buckets["activation"] > 0 == plain.buckets["activation"]  # what the hooks add is the naming


def test_refused_inputs_name_the_argument_and_run_nothing():
    import torch
    lin, opt = _sgd_linear(torch, 2, 2)
    ran = []

    def step():
        ran.append(1)

    with pytest.raises(TypeError, match="step must be a function"):
        measure_torch_step(None, model=lin, optimizer=opt)
    with pytest.raises(TypeError, match="model= must be the torch.nn.Module"):
        measure_torch_step(step, model=opt, optimizer=opt)
    with pytest.raises(TypeError, match="optimizer= must be the torch.optim.Optimizer"):
        measure_torch_step(step, model=lin, optimizer=lin)
    with pytest.raises(ValueError, match="steps"):
        measure_torch_step(step, model=lin, optimizer=opt, steps=0)
    with pytest.raises(TypeError, match="inputs= holds a ndarray"):
        measure_torch_step(step, model=lin, optimizer=opt, inputs=(torch.zeros(2), [torch.zeros(2).numpy()]))
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda'"):
        measure_torch_step(step, model=lin, optimizer=opt, device="mps")
    assert ran == []
    assert measure_torch_step(step, model=lin, optimizer=opt, steps=3).peak == 2 * 2 * 4 + 2 * 4
    assert len(ran) == 3


def test_cuda_without_a_gpu_is_refused_clearly():
    import torch
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the refusal is for machines without one")
    lin, opt = _sgd_linear(torch, 2, 2)
    with pytest.raises(RuntimeError, match="torch sees no CUDA GPU.*device='cpu'"):
        measure_torch_step(lambda: None, model=lin, optimizer=opt, device="cuda")


def test_the_step_is_drawn_by_the_timeline_page_and_the_snapshot_at_its_peak(tmp_path):
    import torch
    step, kwargs = _adamw_step(torch, torch.nn.Tanh())
    r = measure_torch_step(step, **kwargs)
    r.export_page(tmp_path / "step.html")
    text = (tmp_path / "step.html").read_text()
    numbers = json.loads(re.search(r"const DATA = (\{.*?\});\n", text).group(1))
    assert numbers["peak"]["bytes"] == r.peak and numbers["entered"] == r.baseline
    assert numbers["peak"]["by_bucket"] == r.buckets
    assert [m[1] for m in numbers["marks"]] == ["backward", "optimizer"]
    r.export_snapshot(tmp_path / "step.pickle", at="peak")
    with open(tmp_path / "step.pickle", "rb") as f:
        assert pickle.load(f)["segments"][0]["allocated_size"] == r.peak


def _frees_of_unseen_blocks_dropped(records):
    """``torch_profile._records`` as torch reports a free of a block made before profiling: not
    at all. (Torch does report it, with a stale size, when an earlier profile in the process saw a
    block at the same address freed after profiling stopped: its size table keeps the entry.)"""
    def dropped(*args):
        allocations, ops = records(*args)
        seen, kept = set(), []
        for a in allocations:
            if a[2] > 0 or a[1] in seen:
                kept.append(a)
                seen.add(a[1])
        return kept, ops
    return dropped


def test_a_storage_made_before_profiling_and_freed_unseen_is_reported_and_two_steps_see_it(monkeypatch):
    import torch
    lin, opt = _sgd_linear(torch, 2, 2)  # 24 bytes
    lin.register_buffer("table", torch.zeros(1000))

    def step():  # replaces the 4000-byte buffer: the old one is freed before the new one is made
        del lin.table
        lin.register_buffer("table", torch.zeros(1000))

    with monkeypatch.context() as m:  # the old buffer's free unreported, whatever earlier tests profiled
        m.setattr(torch_profile, "_records", _frees_of_unseen_blocks_dropped(torch_profile._records))
        once = measure_torch_step(step, model=lin, optimizer=opt, steps=1)
    assert once.baseline == 24 + 4000 and once.missed_free_bytes == 4000
    assert "4,000 B made before profiling were freed unseen" in once.note
    twice = measure_torch_step(step, model=lin, optimizer=opt, steps=2)
    assert (twice.peak, twice.missed_free_bytes, twice.note) == (24 + 4000, 0, "")
    assert twice.buckets["buffer"] == 4000


def test_a_step_that_raises_leaves_no_hook_behind_and_the_next_measurement_works():
    import torch
    lin, opt = _sgd_linear(torch, 2, 2)
    x = torch.randn(3, 2)
    calls = []

    def step():
        calls.append(1)
        loss = lin(x).square().sum()
        if len(calls) == 2:  # the measured step
            raise RuntimeError("the step failed")
        loss.backward()
        opt.step()
        opt.zero_grad()

    with pytest.raises(RuntimeError, match="the step failed"):
        measure_torch_step(step, model=lin, optimizer=opt)
    assert torch._C._autograd._top_saved_tensors_default_hooks(False) is None
    assert all(not p._post_accumulate_grad_hooks for p in lin.parameters())
    r = measure_torch_step(step, model=lin, optimizer=opt)
    assert r.phase_at_peak == "backward" and r.buckets["activation"] > 0 and sum(r.buckets.values()) == r.peak
