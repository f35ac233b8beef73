"""Techniques combined: each pair must train as the simpler run does (bit for bit where exact)."""
import contextlib

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem.techniques import offload, precision


def _data():
    rng = np.random.default_rng(0)
    return tm.tensor(rng.standard_normal((8, 6)).astype(np.float32)), rng.integers(0, 3, 8)


@contextlib.contextmanager
def _offloader(place):
    """``offload_optimizer`` at ``place``, closed afterwards (no file or thread outlives the test)."""
    made = []
    yield lambda opt: made.append(offload.offload_optimizer(opt, place=place)) or made[-1]
    for opt in made:
        opt.close()


def _half_weights(dtype, wrap_optimizer, steps=3):
    """Half-precision Adam training; ``wrap_optimizer`` may offload the optimizer first."""
    tm.manual_seed(0)
    model = tm.models.MLP([6, 16, 3], activation="gelu", layernorm=True)
    half_model, opt = precision.half(model, wrap_optimizer(tm.optim.Adam(model.parameters(), lr=1e-2)), dtype)
    x, y = _data()
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(half_model(x), y).backward()
        opt.step()
    return list(half_model.float_state_dict().values())


@pytest.mark.parametrize("place", ["host", "disk"])
def test_half_model_with_an_offloaded_optimizer_trains_as_without_offload(place):
    """half(model, offload_optimizer(opt)) raised AttributeError (MasterOptimizer re-keys the
    state through the wrapper, whose ``state`` had no setter)."""
    plain = _half_weights("bfloat16", lambda opt: opt)
    with _offloader(place) as wrap:
        offloaded = _half_weights("bfloat16", wrap)
    for a, b in zip(plain, offloaded):
        np.testing.assert_array_equal(a, b)


def test_offloading_the_master_optimizer_is_refused():
    """offload_optimizer(MasterOptimizer) stepped nothing, silently: its parameters are the
    masters, whose gradients only MasterOptimizer.step copies in."""
    model = tm.models.MLP([6, 3])
    _, opt = precision.half(model, tm.optim.Adam(model.parameters()), "bfloat16")
    with pytest.raises(TypeError, match=r"half\(model, offload_optimizer\(opt\)\)"):
        offload.offload_optimizer(opt)


def test_int8_saved_tensor_decoded_in_backward_is_in_the_ledger():
    """The float32 decode of a compressed saved tensor was not in the ledger (half's decode
    is): a 4-byte-per-value array live during backward that no bucket held."""
    from tinymem import memory
    from tinymem.autograd import Function
    from tinymem.techniques.quantization import compress_saved_activations

    where = []

    class SavesInput(Function):
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        def backward(ctx, g):
            where.append(memory.locate(ctx.saved_tensors[0]))  # a raw array
            return g * 2

    x = tm.tensor(np.linspace(0, 1, 4096, dtype=np.float32), requires_grad=True)
    with compress_saved_activations(8):
        y = SavesInput.apply(x * 1.0)
    y.sum().backward()
    assert where == [("workspace", "device")]


def _recommender_weights(wrap_optimizer, steps=3):
    tm.manual_seed(0)
    model = tm.models.Recommender([50, 30], embedding_dim=8, hidden=16, sparse=True)
    opt = wrap_optimizer(tm.optim.RowWiseAdagrad(model.parameters(), lr=0.1))
    rng = np.random.default_rng(0)
    bags, y = [rng.integers(0, 50, (8, 3)), rng.integers(0, 30, (8, 2))], rng.integers(0, 2, 8)
    for _ in range(steps):
        opt.zero_grad()
        F.cross_entropy(model(bags), y).backward()
        opt.step()
    return [p.numpy() for p in model.parameters()]


@pytest.mark.parametrize("place", ["host", "disk"])
def test_offloaded_rowwise_adagrad_takes_sparse_embedding_gradients(place):
    """A row-sparse gradient raised DeviceError ("device 'cuda' needs CuPy") on its way down to
    the host: device_of took the RowSparse object for a CuPy array."""
    plain = _recommender_weights(lambda opt: opt)
    with _offloader(place) as wrap:
        offloaded = _recommender_weights(wrap)
    for a, b in zip(plain, offloaded):
        np.testing.assert_array_equal(a, b)


def test_half_refuses_sparse_embedding_gradients_up_front():
    # It failed inside backward: 'RowSparse' object has no attribute 'size' (float16), or a
    # TypeError naming RowSparse (bfloat16).
    model = tm.nn.Sequential(tm.nn.EmbeddingBag(10, 4, sparse=True), tm.nn.Linear(4, 2))
    with pytest.raises(TypeError, match="half\\(\\) does not support sparse embedding gradients \\(0\\)"):
        precision.half(model, tm.optim.SGD(model.parameters(), lr=0.1), "bfloat16")
