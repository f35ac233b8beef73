"""The default device decides where everything is made: whole workflows with the default set to
"cuda" (the stand-in for CuPy, tests/standin_cupy.py) and no ``device=`` anywhere, as a user who
wrote ``tm.set_default_device("cuda")`` runs them. Each checks where every array lives and that
the device run computes what the CPU run computes from the same weights."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import backend, nn
from tinymem.techniques import checkpoint, offload, precision
from tinymem.techniques.quantization import compress_saved_activations


def on_device(*arrays):
    """Every array given (Tensors, raw arrays, None skipped) is a device array."""
    data = [a.data if isinstance(a, tm.Tensor) else a for a in arrays if a is not None]
    where = [backend.device_of(a) for a in data]
    assert where == ["cuda"] * len(data), where
    return True


def state_arrays(opt):
    return [v for state in opt.state.values() for v in state.values() if hasattr(v, "shape")]


def test_factories_layers_and_labels_follow_the_default_and_an_explicit_device_wins(standin):
    made = [tm.tensor([3] * 256), tm.tensor(np.ones(3, np.float32)), tm.zeros(2), tm.ones(2),
            tm.randn(2), tm.rand(2), tm.arange(4), tm.full(2, fill_value=1.5), tm.zeros_like(tm.ones(2))]
    assert on_device(*made)
    layers = [nn.Linear(3, 2), nn.Conv2d(1, 2, 3), nn.LayerNorm(4), nn.Embedding(5, 3),
              nn.EmbeddingBag(5, 3), nn.MultiheadAttention(8, 2)]
    norm = nn.BatchNorm2d(2)
    assert on_device(*(p for layer in layers for p in layer.parameters()), *norm.parameters(),
                     norm.running_mean, norm.running_var)
    assert tm.zeros(2, device="cpu").device == "cpu" and nn.Linear(2, 2, device="cpu").weight.device == "cpu"
    with pytest.raises(tm.DeviceError, match="different devices"):
        nn.Linear(2, 2, device="cpu")(tm.ones(1, 2))


def _mlp():
    return tm.models.MLP([8, 16, 3], activation="gelu", layernorm=True), \
        lambda rng: (rng.standard_normal((4, 8)).astype(np.float32), rng.integers(0, 3, 4)), F.cross_entropy


def _transformer():
    model = tm.models.TransformerLM(vocab_size=11, context=6, d_model=16, n_heads=2, n_layers=1)
    return model, lambda rng: (rng.integers(0, 11, (2, 6)), rng.integers(0, 11, 12)), \
        lambda out, y: F.cross_entropy(out.reshape(12, 11), y)


def _unet():
    return tm.models.UNet(in_channels=1, num_classes=3, base=4, depth=2), \
        lambda rng: (rng.standard_normal((2, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, 128)), \
        lambda out, y: F.cross_entropy(out.permute(0, 2, 3, 1).reshape(128, 3), y)


def _recommender():
    model = tm.models.Recommender([10, 7], embedding_dim=4, hidden=8, sparse=False)
    return model, lambda rng: ([rng.integers(0, 10, (4, 3)), rng.integers(0, 7, (4, 3))], rng.integers(0, 2, 4)), \
        F.cross_entropy


def _adam_steps(build, steps=2):
    """A model trained with Adam on NumPy inputs and labels (no device named): losses, model, opt."""
    model, data, loss_fn = build()
    opt = tm.optim.Adam(model.parameters(), lr=1e-2)
    rng, losses = np.random.default_rng(0), []
    x, y = data(rng)
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(x if isinstance(x, list) else tm.tensor(x)), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model, opt


@pytest.mark.parametrize("build", [_mlp, _transformer, _unet, _recommender], ids=lambda b: b.__name__[1:])
def test_each_model_trains_with_adam_on_the_default_device_as_on_the_cpu(build, standin):
    tm.manual_seed(0)
    with backend.default_device_as("cpu"):
        weights = build()[0].state_dict()
        expected, _, _ = _adam_steps(lambda: _with_weights(build, weights))
    losses, model, opt = _adam_steps(lambda: _with_weights(build, weights))
    assert on_device(*model.parameters(), *(p.grad for p in model.parameters()), *state_arrays(opt))
    np.testing.assert_allclose(losses, expected, rtol=1e-5)


def _with_weights(build, weights):
    model, data, loss_fn = build()
    model.load_state_dict(weights)
    return model, data, loss_fn


def test_a_data_loader_epoch_trains_on_the_default_device(standin):
    x, y, _, _ = tm.data.load_digits()
    loader = tm.data.DataLoader((x[:96], y[:96]), batch_size=32)
    model = tm.models.MLP([64, 16, 10])
    opt = tm.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for xb, yb in loader:
        assert on_device(xb, yb)
        opt.zero_grad()
        F.cross_entropy(model(xb), yb).backward()
        opt.step()
    assert on_device(*model.parameters(), *state_arrays(opt))


def _grads(model, x, y, context=None):
    model.zero_grad()
    if context is None:
        loss = F.cross_entropy(model(x), y)
    else:
        with context:
            loss = F.cross_entropy(model(x), y)
    loss.backward()
    return [p.grad.numpy() for p in model.parameters()]


@pytest.mark.parametrize("technique", ["checkpoint", "int8", "host", "disk"])
def test_checkpointing_int8_and_offload_give_the_plain_gradients_on_the_default_device(technique, standin, tmp_path):
    model = tm.models.MLP([8, 32, 32, 3])
    x, y = tm.tensor(np.random.default_rng(1).standard_normal((6, 8)).astype(np.float32)), [0, 1, 2, 0, 1, 2]
    plain = _grads(model, x, y)
    if technique == "checkpoint":
        model.zero_grad()
        F.cross_entropy(checkpoint.checkpoint_sequential(list(model), 2, x), y).backward()
        got = [p.grad.numpy() for p in model.parameters()]
    else:
        context = {"int8": compress_saved_activations(8), "host": offload.save_on_host(),
                   "disk": offload.save_on_disk(tmp_path)}[technique]
        got = _grads(model, x, y, context)
    assert on_device(*(p.grad for p in model.parameters()))
    for a, b in zip(got, plain):
        if technique == "int8":  # 8-bit saved activations: gradients within a few percent
            np.testing.assert_allclose(a, b, rtol=0.1, atol=0.02 * np.abs(b).max())
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_with_masters_and_a_checkpoint_round_trip_stay_on_the_default_device(dtype, standin, tmp_path):
    model = tm.models.MLP([8, 16, 3])
    half_model, opt = precision.half(model, tm.optim.Adam(model.parameters(), lr=1e-2), dtype)
    x = tm.tensor(np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32))
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(half_model(x), [0, 1, 2, 1]).backward()
        opt.step()
    assert on_device(*half_model.parameters(), *opt.param_groups[0]["params"])
    stored = dict(half_model.named_parameters())
    tm.save(stored, tmp_path / "half.npz")
    loaded = tm.load(tmp_path / "half.npz")  # tensors come back on the default device
    assert on_device(*loaded.values())
    for name, value in stored.items():
        np.testing.assert_array_equal(loaded[name].numpy(), value.numpy())


@pytest.mark.parametrize("name", ["SGD", "Adagrad", "RMSprop", "Adam", "AdamW", "Lion", "Adafactor", "Adam8bit",
                                  "GaLore"])
def test_every_optimizer_keeps_its_state_on_the_default_device(name, standin):
    model = tm.models.MLP([8, 16, 3])
    kwargs = {"SGD": {"momentum": 0.9}, "GaLore": {"rank": 2}}.get(name, {})
    opt = getattr(tm.optim, name)(model.parameters(), lr=1e-3, **kwargs)
    x = tm.tensor(np.random.default_rng(3).standard_normal((4, 8)).astype(np.float32))
    for _ in range(2):
        opt.zero_grad()
        F.cross_entropy(model(x), [0, 1, 2, 1]).backward()
        opt.step()
    assert state_arrays(opt) and on_device(*model.parameters(), *state_arrays(opt))


def test_a_loader_given_device_arrays_keeps_them_on_the_host_and_batches_on_the_device(standin):
    x = standin.asarray(np.arange(12, dtype=np.float32).reshape(6, 2))
    loader = tm.data.DataLoader((x, np.arange(6)), batch_size=4, shuffle=False)
    assert all(type(a) is np.ndarray for a in loader.arrays)
    (xb, yb), _ = list(loader)
    assert on_device(xb, yb) and xb.numpy().tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_a_numpy_mask_follows_the_default_device_and_numpy_running_statistics_are_refused(standin):
    a, b = tm.ones(2, 3), tm.zeros(2, 3)
    picked = F.where(np.array([[True, False, True]]), a, b)
    assert on_device(picked) and picked.numpy().tolist() == [[1, 0, 1]] * 2
    x = tm.randn(2, 3, 4, 4)
    with pytest.raises(tm.DeviceError, match="running_mean is on cpu but the input is on cuda"):
        F.batch_norm(x, np.zeros(3, np.float32), np.ones(3, np.float32), training=True)
