"""checkpoint / checkpoint_sequential: bit-identical gradients, recomputation counts, guards."""
import gc
import warnings

import numpy as np
import pytest
from _ckpt_models import Counted, RunningMean, assert_identical, mlp, step_grads
from conftest import assert_close, requires_torch

import tinymem as tm
from tinymem.techniques.checkpoint import checkpoint, checkpoint_sequential


def plain(model, x):
    return model(x)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("segments", [1, 2, 3, 5, "sqrt", 17])
def test_sequential_gradients_bit_identical(device, dtype, segments):
    model = mlp(device, dtype)
    assert len(model) == 17
    ref = step_grads(model, plain, device, dtype)
    got = step_grads(model, lambda m, x: checkpoint_sequential(m, segments, x), device, dtype)
    assert_identical(ref, got)


def test_dropout_needs_rng_replay():
    """Without the RNG replay the recomputed masks differ: the guard is what makes it exact."""
    model = mlp(dropout=0.5)
    ref = step_grads(model, plain)
    got = step_grads(model, lambda m, x: checkpoint_sequential(m, 3, x, preserve_rng_state=False))
    assert not all(np.array_equal(a, b) for a, b in zip(ref, got))


def test_rng_state_after_step_matches_plain_run():
    model = mlp()
    step_grads(model, plain)
    after_plain = tm.get_rng_state()
    step_grads(model, lambda m, x: checkpoint_sequential(m, "sqrt", x))
    assert np.array_equal(after_plain, tm.get_rng_state())


def test_function_of_several_tensors_and_a_constant():
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4, 2)).astype(np.float32)

    def f(a, b, scale):
        return (a @ b).tanh() * scale, (a * a).sum()

    def grads(use_checkpoint):
        a, b = tm.tensor(a0, requires_grad=True), tm.tensor(b0, requires_grad=True)
        y, s = checkpoint(f, a, b, 3.0) if use_checkpoint else f(a, b, 3.0)
        (y.sum() + s).backward()
        return [a.grad.numpy(), b.grad.numpy()]

    assert_identical(grads(False), grads(True))


def test_array_constants_reach_the_function_unchanged_in_both_runs():
    seen = []

    def f(x, table):
        seen.append(type(table))
        return x * tm.tensor(table)

    x = tm.randn(3, requires_grad=True)
    checkpoint(f, x, np.arange(3, dtype=np.float32)).sum().backward()
    assert seen == [np.ndarray, np.ndarray]
    assert np.array_equal(x.grad.numpy(), np.arange(3, dtype=np.float32))


def test_parameter_gradients_arrive_when_the_input_needs_none():
    model = mlp()
    x = tm.randn(6, 8)  # no requires_grad: only the module's parameters can make the node record
    tm.manual_seed(3)
    out = checkpoint(model, x)
    assert out.requires_grad
    out.sum().backward()
    got = [p.grad.numpy() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    tm.manual_seed(3)
    model(x).sum().backward()
    assert_identical([p.grad.numpy() for p in model.parameters()], got)


def test_sqrt_segments_run_every_layer_but_the_last_segment_twice():
    log = []
    layers = [Counted(tm.nn.Linear(4, 4), i, log) for i in range(10)]
    x = tm.randn(2, 4, requires_grad=True)
    checkpoint_sequential(layers, "sqrt", x).sum().backward()  # 4 segments of 10 // 4 = 2 layers
    calls = np.bincount(log, minlength=10)
    assert calls.tolist() == [2] * 6 + [1] * 4


def test_running_statistics_updated_once():
    stat = RunningMean()
    layers = [tm.nn.Linear(4, 4), stat, tm.nn.Tanh(), tm.nn.Linear(4, 4)]
    x = tm.randn(2, 4, requires_grad=True)
    checkpoint_sequential(layers, 2, x).sum().backward()
    assert stat.updates == 1
    expected = 0.1 * float(layers[0](x).data.mean())
    assert stat.running == pytest.approx(expected)


def test_no_grad_outside_just_runs():
    log = []
    layer = Counted(tm.nn.Linear(4, 4), 0, log)
    before = tm.memory.live_bytes("activation")
    with tm.no_grad():
        out = checkpoint(layer, tm.randn(2, 4, requires_grad=True))
    assert not out.requires_grad and out.grad_fn is None
    assert log == [0] and tm.memory.live_bytes("activation") == before


def test_no_grad_inside_is_honoured():
    """Only the part outside the inner no_grad carries a gradient, as in PyTorch."""
    def f(x):
        with tm.no_grad():
            frozen = x * 3.0
        return x * 2.0 + frozen

    x = tm.tensor(np.ones(3, np.float32), requires_grad=True)
    checkpoint(f, x).sum().backward()
    assert np.array_equal(x.grad.numpy(), np.full(3, 2.0, np.float32))


@pytest.mark.parametrize("bad", [lambda x: 3.0, lambda x: {"y": x}, lambda x: (x, x.numpy())])
def test_non_tensor_output_is_a_clear_error(bad):
    with pytest.raises(TypeError, match="must return a Tensor or a tuple of Tensors"):
        checkpoint(bad, tm.randn(2, requires_grad=True))


@pytest.mark.parametrize("segments", [0, 18, "half", 2.0])
def test_bad_segment_counts(segments):
    with pytest.raises((ValueError, TypeError), match="segments"):
        checkpoint_sequential(mlp(), segments, tm.randn(6, 8))


def test_closure_without_grad_inputs_warns():
    w = tm.nn.Parameter(tm.ones(4, 4))  # on the default device, with the input
    with pytest.warns(UserWarning, match="not a Module"):
        checkpoint(lambda x: x @ w, tm.randn(2, 4))


def test_nested_checkpoints_bit_identical():
    model = mlp()
    ref = step_grads(model, plain)
    inner = lambda m, x: checkpoint_sequential(m, 2, x)  # noqa: E731
    got = step_grads(model, lambda m, x: m[16](checkpoint(lambda h: inner(m[:16], h), x)))
    assert_identical(ref, got)


def test_activations_freed_after_backward():
    gc.disable()
    try:
        model = mlp()
        with warnings.catch_warnings():
            step_grads(model, lambda m, x: checkpoint_sequential(m, 4, x))
        assert tm.memory.live_bytes("activation") == 0
    finally:
        gc.enable()


@requires_torch
def test_same_semantics_as_torch_checkpoint_sequential():
    """Same layers, same weights: the same forward calls per layer and the same gradients."""
    import torch
    from torch.utils.checkpoint import checkpoint_sequential as torch_cs

    tm_log, torch_log = [], []
    tm_layers = [Counted(tm.nn.Linear(5, 5) if i % 2 == 0 else tm.nn.Tanh(), i, tm_log) for i in range(11)]

    class TorchCounted(torch.nn.Module):
        def __init__(self, layer, i):
            super().__init__()
            self.layer, self.i = layer, i

        def forward(self, x):
            torch_log.append(self.i)
            return self.layer(x)

    torch_layers = []
    for i, m in enumerate(tm_layers):
        if i % 2 == 0:
            lin = torch.nn.Linear(5, 5)
            with torch.no_grad():
                lin.weight.copy_(torch.from_numpy(m.layer.weight.numpy()))
                lin.bias.copy_(torch.from_numpy(m.layer.bias.numpy()))
            torch_layers.append(TorchCounted(lin, i))
        else:
            torch_layers.append(TorchCounted(torch.nn.Tanh(), i))
    x0 = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    for segments in (1, 3, 4):
        tm_log.clear()
        torch_log.clear()
        x = tm.tensor(x0, requires_grad=True)
        checkpoint_sequential(tm_layers, segments, x).sum().backward()
        xt = torch.tensor(x0, requires_grad=True)
        torch_cs(torch.nn.Sequential(*torch_layers), segments, xt, use_reentrant=True).sum().backward()
        assert sorted(tm_log) == sorted(torch_log), f"segments={segments}"
        assert_close(x.grad, xt.grad.numpy(), what=f"segments={segments}")
