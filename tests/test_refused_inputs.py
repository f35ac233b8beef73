"""Inputs that used to give a silently wrong answer (or a bare error from deep inside NumPy) and
are now refused with a message naming what was wrong. Each case was found by an audit; the
comment says what happened before."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import data, edge, memory, nn, optim
from tinymem.planner import analytic, workload
from tinymem.planner.terms.analytic import Stack
from tinymem.planner.measured.recipe import Combination, TrainingStep
from tinymem.techniques import quantization as Q
from tinymem.techniques.precision import GradScaler

# Made per call, not at import: a module-level Parameter stays counted in the ledger for the whole
# test session, and the tests that hold live bytes to an exact count would see it.
def X4():
    return np.array([-1.0, 0.0, 0.5, 1.0], np.float32)


def P():
    return nn.Parameter(np.ones(3, np.float32))


def CNN():
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2)).eval()


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 2)

    def forward(self, x):
        return self.b(self.a(x) + x)


CASES = {
    # an integer image: every sum truncated (int64 output of the input's dtype)
    "conv2d int input": (lambda: F.conv2d(tm.tensor(np.ones((1, 3, 5, 5), np.int64)), tm.randn(2, 3, 3, 3)),
                         TypeError, "both must be floating"),
    # 1/std cast to int: all zeros
    "layer_norm int input": (lambda: F.layer_norm(tm.tensor(np.array([[1, 2, 4]])), 3), TypeError, "x.float()"),
    "layer_norm eps < 0": (lambda: F.layer_norm(tm.randn(2, 3), 3, eps=-1.0), ValueError, "eps must be > 0"),
    "batch_norm eps < 0": (lambda: F.batch_norm(tm.randn(2, 3, 4, 4), training=True, eps=-1), ValueError, "eps > 0"),
    "BatchNorm2d eps < 0": (lambda: nn.BatchNorm2d(3, eps=-1), ValueError, "eps must be > 0"),  # now at construction
    # the lambda was kept as a plain attribute and skipped by forward
    "Sequential of a function": (lambda: nn.Sequential(nn.Linear(2, 2), lambda z: z), TypeError, "takes Modules"),
    # reported as "device 'cuda' needs CuPy"
    "a list as an array": (lambda: F.exp([1.0, 2.0]), TypeError, "got list"),
    # a group's own betas skipped the constructor's check; one step made the weights NaN
    "group betas of 1": (lambda: optim.Adam([{"params": [P()], "betas": (0.9, 1.0)}]), ValueError, "betas"),
    "group betas above 1": (lambda: optim.Lion([{"params": [P()], "betas": (1.5, 0.9)}]), ValueError, "betas"),
    # every step skipped, silently
    "GradScaler inf scale": (lambda: GradScaler(init_scale=float("inf")), ValueError, "finite number > 0"),
    "GradScaler update to 0": (lambda: GradScaler().update(0.0), ValueError, "finite number > 0"),
    # garbage codes, NaN, or a clamp that shifts every value
    "quantize scale 0": (lambda: Q.quantize(X4(), 0.0, 0), ValueError, "scale must be finite and > 0"),
    "quantize zero_point out of range": (lambda: Q.quantize(X4(), 0.01, 300), ValueError, "outside the range"),
    "quantize fractional zero_point": (lambda: Q.quantize(X4(), 0.01, 3.7), ValueError, "must be an integer"),
    "fake_quantize negative scale": (lambda: Q.fake_quantize(tm.tensor(X4()), -1.0, 0), ValueError, "scale"),
    "misspelled qscheme": (lambda: Q.qparams_from_minmax(-1.0, 1.0, "per_tensor_symetric"), ValueError,
                           "unknown qscheme"),
    # trained in bf16 / without offload, silently
    "unknown precision": (lambda: TrainingStep(workload("mlp", "4,8,2"), Combination(precision="fp8")),
                          ValueError, "unknown precision 'fp8'"),
    "unknown offload": (lambda: TrainingStep(workload("mlp", "4,8,2"), Combination(offload="disk")),
                        ValueError, "unknown offload 'disk'"),
    "more stages than layers": (lambda: analytic.breakdown("gpt2", 1, Stack(pipeline=24)), ValueError,
                                "24 pipeline stages for 12 layers"),
    # the input's extra channels were skipped by the loop over the weight's channels
    "edge conv extra channels": (lambda: edge.inference_peak(CNN(), (5, 8, 8)), ValueError, "expected (B, 3, H, W)"),
    "edge x vs input_shape": (lambda: edge.inference_peak(CNN(), (3, 8, 8), x=np.zeros((1, 3, 16, 16))),
                              ValueError, "does not match input_shape"),
    # read as a tuple of its rows
    "DataLoader of one array": (lambda: data.DataLoader(np.arange(30.0).reshape(10, 3), batch_size=4), TypeError,
                                "tuple of arrays"),
    "DataLoader batch 2.5": (lambda: data.DataLoader((np.ones(3),), batch_size=2.5), ValueError, "integer >= 1"),
    # live bytes on disk went negative
    "negative bytes": (lambda: memory.LEDGER.register_bytes(object(), -100, "workspace", "disk"), ValueError,
                       "whole number >= 0"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_refused_with_a_message_saying_what_was_wrong(name):
    make, error, message = CASES[name]
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_partitioning_refuses_a_model_whose_forward_it_would_skip():
    # It ran the children one after another: the residual sum was skipped and the loss differed.
    from tinymem.distributed import units
    with pytest.raises(TypeError, match="has its own forward"):
        units.split_units(_Residual())
    assert len(units.split_units(nn.Sequential(nn.Linear(2, 2), nn.ReLU()))) == 2


def test_save_refuses_a_structured_array_with_an_object_field(tmp_path):
    # It wrote a pickled array that load refuses, over a good checkpoint.
    path = tmp_path / "ckpt.npz"
    tm.save({"w": np.ones(2)}, path)
    with pytest.raises(tm.CheckpointError, match="object arrays"):
        tm.save(np.zeros(2, dtype=[("a", object)]), path)
    np.testing.assert_array_equal(tm.load(path)["w"], np.ones(2))  # the good one is untouched


def test_the_checks_leave_valid_input_alone():
    assert F.layer_norm(tm.randn(2, 3), 3).shape == (2, 3)
    assert Q.quantize(X4(), 0.01, 3).dtype == np.uint8 and Q.quantize(X4(), 0.01, -5, "qint8").dtype == np.int8
    assert optim.Adam([{"params": [P()], "betas": (0.9, 0.99)}]).param_groups[0]["betas"] == (0.9, 0.99)
    assert edge.inference_peak(CNN(), (3, 8, 8))["peak"] > 0
    assert len(data.DataLoader([np.ones(5)], batch_size=2)) == 3


def test_calculator_and_planner_refuse_sizes_that_gave_negative_or_fractional_answers():
    from tinymem import planner
    from tinymem.distributed import calculator
    for params, world in ((1e9, 0), (-1e9, 2)):  # a ZeroDivisionError, or negative bytes
        with pytest.raises(ValueError, match="params must be >= 0 and world_size >= 1"):
            calculator.model_state_bytes(params, world, "zero3")
        with pytest.raises(ValueError, match="params must be >= 0 and world_size >= 1"):
            calculator.traffic_bytes(params, world, "zero3")
    probe = planner.run_probe(workload("mlp", "4,8,2"), Combination(), check=False)
    for batch in (0, 2.5, "8"):  # 2.5 used to give a number
        with pytest.raises(ValueError, match="batch_size must be a positive integer"):
            planner.predict(probe, batch)
    assert planner.predict(probe, np.int64(4)).total > 0
