"""The engine: graph, accumulation, hooks, modes and the errors users meet."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory


def test_tensor_used_twice_accumulates_and_grad_accumulates_across_backwards(device):
    x = tm.tensor([1.0, 2.0, 3.0], requires_grad=True, device=device)
    (x * x + x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1, 2, 3]) + 1)
    (x * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.array([1, 2, 3]) + 3)
    x.grad = None
    (x * 2.0).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2, 2, 2])


def test_add_gives_each_input_its_own_gradient_buffer():
    a = tm.tensor(np.ones(3), requires_grad=True)
    b = tm.tensor(np.ones(3), requires_grad=True)
    (a + b).sum().backward()
    a.grad.data *= 10  # what unscale_ or clipping do in place
    np.testing.assert_array_equal(b.grad.numpy(), np.ones(3))


@pytest.mark.parametrize("loss", [lambda p: p.mean(), lambda p: p.sum() * 2.0, lambda p: p.sum(axis=1).mean()],
                         ids=["mean", "sum_times_2", "sum_axis_then_mean"])
def test_a_broadcast_gradient_becomes_a_grad_that_can_be_edited_in_place(loss):
    # sum's and mean's backward return a broadcast view of one value; as .grad it must be a
    # buffer of its own, or clipping and unscale_ fail (read-only) or write every element at once.
    p = tm.tensor(np.arange(6.0, dtype=np.float32).reshape(2, 3), requires_grad=True)
    loss(p).backward()
    expected = p.grad.numpy().copy()
    p.grad.data[0, 0] *= 10  # what unscale_ or clipping do in place
    expected[0, 0] *= 10
    np.testing.assert_array_equal(p.grad.numpy(), expected)
    tm.nn.utils.clip_grad_norm_([p], 1e-3)
    assert np.linalg.norm(p.grad.numpy()) == pytest.approx(1e-3, rel=1e-3)


def test_chain_of_3000_ops_backpropagates_without_recursion():
    x = tm.tensor(np.ones((2, 3)), requires_grad=True)
    h = x
    for _ in range(3000):
        h = F.tanh(h) + h * 0.0 + 0.5
    h.sum().backward()
    assert x.grad.shape == (2, 3) and np.all(np.isfinite(x.grad.numpy()))


def test_backward_on_non_scalar_needs_a_gradient():
    x = tm.tensor(np.ones((2, 2)), requires_grad=True)
    with pytest.raises(RuntimeError, match="scalar outputs"):
        (x * 2.0).backward()
    (x * 2.0).backward(np.full((2, 2), 0.5))
    np.testing.assert_allclose(x.grad.numpy(), np.ones((2, 2)))


def test_second_backward_without_retain_graph_is_refused():
    x = tm.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), [4.0, 8.0])
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_no_grad_records_nothing_and_saves_nothing():
    x = tm.tensor(np.ones((50, 50)), requires_grad=True)
    before = memory.live_bytes("activation")
    with tm.no_grad():
        y = F.exp(x) * x
    assert not y.requires_grad and y.grad_fn is None
    assert memory.live_bytes("activation") == before
    with pytest.raises(RuntimeError, match="does not require grad"):
        y.sum().backward()


def test_detach_cuts_the_graph():
    x = tm.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3.0).detach() * x
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 6.0])


def test_saved_tensors_hooks_see_every_saved_tensor_and_feed_backward():
    packed, unpacked = [], []

    def pack(t):
        packed.append(t.shape)
        return t.data.astype(np.float64) * 1.0  # a copy on the tensor's own device

    def unpack(a):
        unpacked.append(a.shape)
        return a

    x = tm.tensor(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)
    w = tm.tensor(np.random.default_rng(1).standard_normal((3, 2)), requires_grad=True)
    with tm.saved_tensors_hooks(pack, unpack):
        y = F.tanh(x @ w).sum()
    assert sorted(packed) == sorted([(4, 3), (3, 2), (4, 2)])
    y.backward()
    assert sorted(unpacked) == sorted(packed)
    ref_x = tm.tensor(x.numpy(), requires_grad=True)
    ref_w = tm.tensor(w.numpy(), requires_grad=True)
    F.tanh(ref_x @ ref_w).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), ref_x.grad.numpy())
    np.testing.assert_array_equal(w.grad.numpy(), ref_w.grad.numpy())


def test_hooks_storage_is_counted_as_activation_and_released():
    x = tm.tensor(np.ones((100, 100), np.float32), requires_grad=True)
    base = memory.live_bytes("activation")
    with tm.saved_tensors_hooks(lambda t: t.data.astype(np.float16), lambda a: a.astype(np.float32)):
        y = F.exp(x)  # saves its float32 output, stored as float16
    assert memory.live_bytes("activation") - base == 100 * 100 * 2
    y.sum().backward()
    assert memory.live_bytes("activation") == base


def test_custom_function_in_pytorch_style():
    class Cube(tm.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a ** 3

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 3 * a * a * g

    x = tm.tensor([1.0, -2.0], requires_grad=True)
    Cube.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [3.0, 12.0])


def test_broadcast_gradient_is_summed_to_the_input_shape():
    b = tm.tensor(np.zeros((1, 3)), requires_grad=True)
    x = tm.tensor(np.ones((4, 2, 3)))
    (x + b).sum().backward()
    np.testing.assert_allclose(b.grad.numpy(), np.full((1, 3), 8.0))


def test_defaults_and_dtypes_follow_pytorch():
    assert tm.tensor([1.0, 2.0]).dtype == np.float32
    assert tm.tensor([1, 2]).dtype == np.int64
    assert tm.tensor(np.ones(2)).dtype == np.float64
    assert tm.tensor([1, 2], dtype="float16").dtype == np.float16
    with pytest.raises(TypeError, match="unknown dtype 'float8'.*float32"):
        tm.tensor([1.0], dtype="float8")
    with pytest.raises(TypeError, match="bfloat16"):
        tm.tensor([1.0], dtype="bfloat16")
    with pytest.raises(TypeError, match="floating-point"):
        tm.tensor([1, 2], requires_grad=True)


def test_unknown_device_and_cuda_without_cupy_explain_themselves():
    with pytest.raises(tm.DeviceError, match="unknown device 'tpu'.*cpu, cuda"):
        tm.tensor([1.0], device="tpu")
    if not tm.cuda_available():
        with pytest.raises(tm.DeviceError, match="CuPy|GPU"):
            tm.tensor([1.0], device="cuda")


def test_item_numpy_repr_and_grad_assignment():
    x = tm.tensor([[2.5]], requires_grad=True)
    assert x.item() == 2.5 and "requires_grad=True" in repr(x)
    x.grad = np.ones((1, 1), np.float32)
    assert memory.live_bytes("gradient") >= 4
    with pytest.raises(ValueError, match="shape"):
        x.grad = np.ones(3)
    with pytest.raises(ValueError, match="one element"):
        tm.tensor([1.0, 2.0]).item()


def test_multiple_outputs_get_their_gradients_and_unused_outputs_count_zero():
    class Split(tm.Function):
        def forward(ctx, a):
            return a * 2, a * 3

        def backward(ctx, g1, g2):
            return 2 * g1 + 3 * g2

    x = tm.tensor([1.0, 1.0], requires_grad=True)
    first, _ = Split.apply(x)
    first.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_grad_modes_follow_pytorch_as_calls_decorators_and_generators():
    tm.set_grad_enabled(False)  # called alone, it switches at once
    try:
        assert not tm.is_grad_enabled()
    finally:
        tm.set_grad_enabled(True)
    assert tm.is_grad_enabled()
    with tm.no_grad():
        with tm.set_grad_enabled(True):
            assert tm.is_grad_enabled()
        assert not tm.is_grad_enabled()

    @tm.no_grad  # without parentheses too
    def plain():
        return tm.is_grad_enabled()

    @tm.no_grad()
    def steps():
        yield tm.is_grad_enabled()
        yield tm.is_grad_enabled()

    assert plain() is False
    gen = steps()
    assert next(gen) is False and tm.is_grad_enabled() and next(gen) is False  # the caller's mode between


def test_functional_backward_checks_what_tensor_backward_checks():
    x = tm.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(ValueError, match="shape"):
        tm.backward([x * 2], [np.ones((2, 2))])
    with pytest.raises(RuntimeError, match="scalar outputs"):
        tm.backward([x * 2])
    with pytest.raises(RuntimeError, match="does not require grad"):
        tm.backward([tm.tensor(1.0)])
    tm.backward([(x * 2).sum(), x * 3], [None, np.ones(2)])
    np.testing.assert_array_equal(x.grad.numpy(), [5.0, 5.0])


def test_an_integer_leaf_made_to_require_grad_is_refused_at_backward():
    t = tm.tensor([1, 2])
    t.requires_grad = True  # by assignment, past requires_grad_'s check
    with pytest.raises(TypeError, match="only floating-point tensors"):
        (t * 1.5).sum().backward()


def test_factories_default_to_float32_and_clone_keeps_the_dtype():
    for make in (tm.zeros, tm.ones, tm.randn, tm.rand):
        assert make(2, dtype=None).dtype == np.float32
    with pytest.raises(TypeError, match="floating dtype"):
        tm.randn(3, dtype="int64")
    flags = tm.tensor([True, False])
    copy = flags.clone()
    assert copy.dtype == np.bool_ and copy.data is not flags.data
