"""Host syncs of per-step code paths, held on the CuPy stand-in (as ``tests/test_gpu_budgets.py``).

A host sync (``float()``, ``int()``, ``bool()``, ``.item()``, ``.tolist()``, ``asnumpy`` of a
device array; an ``if`` on a device value is a ``bool()``) stalls the host until the device has
finished everything queued, and so does an operation whose result's size depends on the values
(``nonzero``, ``unique``, a boolean mask). A step of row-wise Adagrad, gradient clipping,
micro-batching, compressed saved activations, embedding bags, quantization-aware training and
an fp16 step that clips reads on the host only what its caller asked for, or what sizes its
result; each test prints where every sync came from when a budget is broken, and checks that
the device's numbers are the CPU's.
"""
import numpy as np
import pytest

import standin_cupy as sc
import tinymem as tm
import tinymem.functional as F
from tinymem import backend, models, nn, optim
from tinymem.nn.utils import clip_grad_norm_
from tinymem.techniques.microbatch import accumulate_gradients
from tinymem.techniques.precision import GradScaler, half
from tinymem.techniques.quantization.compressed import compress_saved_activations
from tinymem.techniques.quantization.modules import prepare_qat


@pytest.fixture
def cuda(standin):
    return standin


def _within(counts, syncs, what):
    assert counts.syncs <= syncs, f"{what}: syncs over budget ({syncs}): {counts.report()}"


def _mlp_problem(widths, device):
    """One MLP and batch, made on the CPU and moved: the same numbers on either device."""
    tm.manual_seed(0)
    model = models.MLP(widths).to(device)
    rng = np.random.default_rng(0)
    x = tm.tensor(rng.standard_normal((8, widths[0])).astype(np.float32), device=device)
    y = tm.tensor(rng.integers(0, widths[-1], 8), device=device)
    return model, x, y


def test_the_stand_in_counts_a_sync_where_cupy_reads_a_result_size_on_the_host(cuda):
    """nonzero, flatnonzero, argwhere, unique, extract, compress and a boolean mask give as many
    elements as the values say: CuPy reads that count on the host before it allocates. Slices,
    integer gathers and where() know their size: no sync."""
    x = cuda.asarray(np.array([0.0, 2.0, 0.0, 3.0], np.float32))
    mask = x > 0
    sized = [lambda: cuda.nonzero(x), lambda: cuda.flatnonzero(x), lambda: cuda.argwhere(x),
             lambda: cuda.unique(x), lambda: cuda.extract(mask, x), lambda: cuda.compress(mask, x),
             lambda: x[mask], lambda: x.nonzero()]
    for op in sized:
        with sc.counting() as counts:
            op()
        assert counts.syncs == 1, counts.report()
    with sc.counting() as counts:
        x[1:], x[cuda.asarray(np.array([0, 3]))], cuda.where(mask, x, 0)  # noqa: B018
    assert counts.syncs == 0, counts.report()


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_a_rowwise_adagrad_step_makes_no_host_sync(cuda, sparse, weight_decay):
    """Rows 2..5 get no gradient (they must stay put); the step is the CPU's."""
    tables = {}
    for device in ("cpu", "cuda"):
        tm.manual_seed(0)
        layer = nn.EmbeddingBag(6, 3, mode="sum", sparse=sparse).to(device)
        opt = optim.RowWiseAdagrad(layer.parameters(), lr=0.1, eps=0.0 if not weight_decay else 1e-10,
                                   weight_decay=weight_decay)
        ids = tm.tensor(np.array([[0, 1], [1, 1]]), device=device)
        for _ in range(2):
            opt.zero_grad()
            layer(ids).sum().backward()
            with sc.counting() as counts:
                opt.step()
        tables[device] = (layer.weight.numpy(), backend.to_numpy(opt.state[layer.weight]["sum"]))
    _within(counts, 0, "RowWiseAdagrad step")
    for cpu, dev in zip(tables["cpu"], tables["cuda"]):
        assert np.array_equal(cpu, dev)


@pytest.mark.parametrize("max_norm", [0.5, 100.0], ids=["clips", "does-not-clip"])
def test_clip_grad_norm_makes_no_host_sync(cuda, max_norm):
    """As torch.nn.utils.clip_grad_norm_: the norm comes back as a device tensor and the
    gradients are always multiplied by min(1, max_norm / (norm + 1e-6)); only
    ``error_if_nonfinite=True`` reads the norm on the host."""
    rng = np.random.default_rng(0)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (5,))]
    results = {}
    for device in ("cpu", "cuda"):
        params = [tm.tensor(np.zeros_like(g), requires_grad=True, device=device) for g in grads]
        for p, g in zip(params, grads):
            p.grad = tm.tensor(g.copy(), device=device)
        with sc.counting() as counts:
            total = clip_grad_norm_(params, max_norm)
        results[device] = [total.numpy()] + [p.grad.numpy() for p in params]
    _within(counts, 0, "clip_grad_norm_")
    assert total.device == "cuda"
    for cpu, dev in zip(results["cpu"], results["cuda"]):
        assert np.array_equal(cpu, dev)
    with sc.counting() as counts:
        clip_grad_norm_(params, max_norm, error_if_nonfinite=True)
    assert counts.syncs == 1, counts.report()  # the check the caller asked for


@pytest.mark.parametrize("micro_batches", [1, 4])
def test_micro_batching_reads_the_loss_once_per_call_not_per_micro_batch(cuda, micro_batches):
    """The full-batch loss it returns (a Python float) is the one read on the host."""
    losses, grads = {}, {}
    for device in ("cpu", "cuda"):
        model, x, y = _mlp_problem([6, 16, 3], device)
        with sc.counting() as counts:
            losses[device] = accumulate_gradients(lambda a, b: F.cross_entropy(model(a), b), (x, y),
                                                  micro_batches=micro_batches)
        grads[device] = [p.grad.numpy() for p in model.parameters()]
    _within(counts, 1, f"accumulate_gradients over {micro_batches} micro-batches")
    assert isinstance(losses["cuda"], float) and losses["cuda"] == losses["cpu"]
    for cpu, dev in zip(grads["cpu"], grads["cuda"]):
        np.testing.assert_allclose(dev, cpu, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("bits", [8, 4])
def test_compressed_saved_activations_sync_once_per_tensor_packed(cuda, bits):
    """Forward and backward of an MLP whose saved activations are all finite: one host sync per
    tensor packed, the check whether it holds NaN or inf, which compress() keeps exactly (their
    count sets the packed size, so it must be known on the host; CuPy's nonzero would read it
    too). Nothing else in forward or backward reads the device."""
    grads = {}
    for device in ("cpu", "cuda"):
        model, x, y = _mlp_problem([6, 32, 32, 3], device)
        tm.manual_seed(1)
        hook = compress_saved_activations(bits=bits, stochastic=False)  # the devices' RNGs differ
        with sc.counting() as counts:
            with hook:
                loss = F.cross_entropy(model(x), y)
            loss.backward()
        grads[device] = [p.grad.numpy() for p in model.parameters()]
    assert hook.stats["tensors"] == 4
    _within(counts, hook.stats["tensors"], f"int{bits} saved activations")
    for cpu, dev in zip(grads["cpu"], grads["cuda"]):
        np.testing.assert_allclose(dev, cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_an_embedding_bag_step_makes_no_host_sync_and_an_id_out_of_range_gives_nan(cuda, sparse, mode):
    """Forward and backward of EmbeddingBag as embedding's: the CPU raises IndexError for an id
    out of range, a device reads no bound on the host and gives that bag NaN, and NaN in the
    gradient of the clipped row (so a GradScaler skips the step); the other rows are the CPU's.
    A sparse gradient's one sync is its coalesce: how many distinct rows, its size."""
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 10, (4, 3))
    g = rng.standard_normal((4, 5)).astype(np.float32)
    results = {}
    for device in ("cpu", "cuda"):
        tm.manual_seed(0)
        bag = nn.EmbeddingBag(10, 5, mode=mode, sparse=sparse).to(device)
        with sc.counting() as counts:
            bag(tm.tensor(ids, device=device)).backward(tm.tensor(g, device=device))
        grad = bag.weight.grad.data
        results[device] = backend.to_numpy(grad.to_dense() if sparse else grad)
    _within(counts, int(sparse), f"EmbeddingBag({mode}, sparse={sparse})")
    assert np.array_equal(results["cpu"], results["cuda"])
    bad = ids.copy()
    bad[1, 2] = 12  # clipped to row 9
    with pytest.raises(IndexError, match=r"embedding_bag ids must be in \[0, 10\)"):
        nn.EmbeddingBag(10, 5, mode=mode, sparse=sparse).to("cpu")(tm.tensor(bad, device="cpu"))
    bag.zero_grad()
    with sc.counting() as counts:
        out = bag(tm.tensor(bad, device="cuda"))
        out.backward(tm.tensor(g, device="cuda"))
    _within(counts, int(sparse), "EmbeddingBag with an id out of range")
    out = out.numpy()
    assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2, 3]]).all()
    grad = bag.weight.grad.data
    grad = backend.to_numpy(grad.to_dense() if sparse else grad)
    assert np.isnan(grad[9]).all()


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_qat_step_syncs_once_per_observer_call(cuda, per_channel):
    """Quantization-aware training: each FakeQuantLinear observes its input and its weight, and
    each observer reads once on the host whether the values are all finite (it warns when not).
    The qparams the observers give are finite and ordered by construction, so neither their
    computation nor fake_quantize reads them on the host again (they did: 2 syncs each)."""
    grads = {}
    for device in ("cpu", "cuda"):
        model, x, y = _mlp_problem([6, 16, 3], device)
        prepare_qat(model, per_channel=per_channel)
        F.cross_entropy(model(x), y).backward()
        model.zero_grad()
        with sc.counting() as counts:
            F.cross_entropy(model(x), y).backward()
        grads[device] = [p.grad.numpy() for p in model.parameters()]
    _within(counts, 4, "QAT step, 2 FakeQuantLinear layers")  # 2 layers x (input, weight) observers
    for cpu, dev in zip(grads["cpu"], grads["cuda"]):
        np.testing.assert_allclose(dev, cpu, rtol=1e-5, atol=1e-6)


def test_embedding_bag_offsets_on_a_device_are_not_read_on_the_host(cuda):
    """(n,) ids with (B,) offsets, PyTorch's layout, empty bags included. Host offsets are checked
    on the host for free and still refused; offsets on the device are not read (it took 3 syncs,
    and a mask CuPy sizes on the host): invalid ones give every bag NaN, and NaN gradients."""
    ids, offsets, g = np.array([1, 1, 2, 5, 3]), np.array([0, 2, 2, 5]), np.ones((4, 3), np.float32)
    results = {}
    for device in ("cpu", "cuda"):
        table = tm.tensor(np.arange(18, dtype=np.float32).reshape(6, 3), device=device, requires_grad=True)
        with sc.counting() as counts:
            out = F.embedding_bag(tm.tensor(ids, device=device), table, tm.tensor(offsets, device=device))
            out.backward(tm.tensor(g, device=device))
        results[device] = (out.numpy(), table.grad.numpy())
    _within(counts, 0, "embedding_bag with device offsets")
    for cpu, dev in zip(results["cpu"], results["cuda"]):
        assert np.array_equal(cpu, dev)
    with pytest.raises(ValueError, match="offsets must start at 0"):
        F.embedding_bag(tm.tensor(ids, device="cuda"), table, np.array([0, 3, 2, 5]))
    for bad in ([0, 3, 2, 5], [1, 2, 2, 5], [0, 2, 2, 6]):
        table.grad = None
        with sc.counting() as counts:
            out = F.embedding_bag(tm.tensor(ids, device="cuda"), table, tm.tensor(np.array(bad), device="cuda"))
            out.backward(tm.tensor(g, device="cuda"))
        _within(counts, 0, f"embedding_bag with invalid device offsets {bad}")
        assert np.isnan(out.numpy()).all() and np.isnan(table.grad.numpy()[[1, 2, 3, 5]]).all(), bad


def test_an_fp16_step_that_unscales_and_clips_syncs_once(cuda):
    """PyTorch's AMP recipe with clipping: scale, backward, unscale_, clip_grad_norm_, step,
    update. The one host read is the GradScaler's inf/NaN flag (the clip read the norm too)."""
    tm.manual_seed(0)
    model = models.MLP([32, 64, 64, 10])
    model, opt = half(model, optim.Adam(model.parameters(), lr=1e-3), "float16")
    scaler = GradScaler()
    rng = np.random.default_rng(0)
    x, y = tm.tensor(rng.standard_normal((16, 32)).astype(np.float32)), tm.tensor(np.arange(16) % 10)
    for _ in range(2):  # the second step: the state is made
        with sc.counting() as counts:
            opt.zero_grad()
            scaler.scale(F.cross_entropy(model(x), y)).backward()
            scaler.unscale_(opt)
            norm = clip_grad_norm_(opt.master_params(), 1.0)
            scaler.step(opt)
            scaler.update()
    _within(counts, 1, "fp16 step with unscale_ and clip_grad_norm_")
    assert norm.device == "cuda" and np.isfinite(norm.numpy())
