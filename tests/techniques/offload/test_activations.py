"""Activation offload (save_on_host / save_on_disk): exactness, ledger, bytes moved, robustness."""
import gc
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.autograd import Function
from tinymem.techniques import offload
from tinymem.techniques.offload import OffloadError


def _batch(device, n=32, d=48):
    rng = np.random.default_rng(0)
    x = tm.tensor(rng.standard_normal((n, d)).astype(np.float32), device=device)
    y = tm.tensor(rng.integers(0, 10, n), device=device)
    return x, y


def _model(device, width=64):
    tm.manual_seed(0)
    return tm.models.MLP([48, width, width, 10], layernorm=True, dropout=0.1).to(device)


def _train(device, make_ctx=None, steps=2):
    """Grads of every step and the final parameters; offload around forward+backward."""
    model = _model(device)
    opt = tm.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _batch(device)
    grads = []
    for _ in range(steps):
        opt.zero_grad()
        if make_ctx is None:
            F.cross_entropy(model(x), y).backward()
        else:
            with make_ctx():
                F.cross_entropy(model(x), y).backward()
        grads.append([p.grad.numpy().copy() for p in model.parameters()])
        opt.step()
    return grads, [p.numpy().copy() for p in model.parameters()]


MODES = {
    "host": lambda d: offload.save_on_host(),
    "host-noprefetch": lambda d: offload.save_on_host(prefetch=0),
    "disk": lambda d: offload.save_on_disk(directory=d),
    "disk-noprefetch": lambda d: offload.save_on_disk(directory=d, prefetch=0),
    "disk-prefetch3": lambda d: offload.save_on_disk(directory=d, prefetch=3),
}


@pytest.mark.parametrize("mode", list(MODES))
def test_offloaded_training_is_bit_identical(device, mode, tmp_path):
    plain_grads, plain_params = _train(device)
    grads, params = _train(device, lambda: MODES[mode](str(tmp_path)))
    for step_plain, step_off in zip(plain_grads, grads):
        for a, b in zip(step_plain, step_off):
            assert np.array_equal(a, b)
    for a, b in zip(plain_params, params):
        assert np.array_equal(a, b)
    assert os.listdir(tmp_path) == []


def _saved_schedule(model, x, y):
    return offload.saved_schedule(lambda: F.cross_entropy(model(x), y))


@pytest.mark.parametrize("place", ["host", "disk"])
def test_bytes_moved_and_ledger_places_follow_the_schedule(device, place, tmp_path):
    model = _model(device, width=256)
    x, y = _batch(device)
    sizes = _saved_schedule(model, x, y)
    ctx = offload.save_on_host() if place == "host" else offload.save_on_disk(str(tmp_path))
    with ctx:
        loss = F.cross_entropy(model(x), y)
        assert memory.live_bytes("activation", "device") == 0, memory.format_table(memory.LEDGER.by_bucket())
        assert memory.live_bytes("activation", place) == sum(sizes)
        loss.backward()
        del loss
    stats = ctx.stats()
    # On NumPy, backward reads a host copy where it is: nothing moves back.
    moved_back = 0 if (place, device) == ("host", "cpu") else sum(sizes)
    assert stats["bytes_out"] == sum(sizes) and stats["bytes_in"] == moved_back
    assert stats["prefetch_hits"] + stats["prefetch_misses"] == len(sizes)  # one load per array
    assert stats["prefetch_hits"] > 0
    assert memory.live_bytes("activation", place) == 0


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_device_peak_stays_under_the_bound(depth, tmp_path):
    model = _model("cpu", width=512)
    x, y = _batch("cpu", n=256)
    sizes = _saved_schedule(model, x, y)
    with memory.track(measure=False) as plain:
        F.cross_entropy(model(x), y).backward()
    model.zero_grad()
    with memory.track(measure=False) as t, offload.save_on_disk(str(tmp_path), prefetch=depth):
        F.cross_entropy(model(x), y).backward()
    # The activation bucket disappears from the device; in backward at most the tensors of the
    # node being run (two here) plus `depth` prefetched ones come back, on top of what the plain
    # step holds besides activations at its worst moment.
    rest = max(sum(e["live"].values()) - e["live"]["activation"] for e in plain.timeline())
    bound = rest + (depth + 2) * max(sizes)
    assert t.max_by_bucket()["activation"] == 0
    assert t.peak() <= bound, t.table() + f"\nbound {bound:,d} B, plain peak {plain.peak():,d} B"
    assert t.peak() < plain.peak()


def test_host_offload_allows_backward_after_the_block(device):
    model = _model(device)
    x, y = _batch(device)
    with offload.save_on_host():
        loss = F.cross_entropy(model(x), y)
    loss.backward()
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    tm.manual_seed(0)
    model2 = _model(device)
    F.cross_entropy(model2(x), y).backward()
    assert all(np.array_equal(a, p.grad.numpy()) for a, p in zip(got, model2.parameters()))


def _plain_grads(device="cpu"):
    model = _model(device)
    x, y = _batch(device)
    F.cross_entropy(model(x), y).backward()
    return [p.grad.numpy().copy() for p in model.parameters()]


def _offload_threads():
    return [t for t in threading.enumerate() if t.name == "tinymem-offload"]


@pytest.mark.parametrize("prefetch", [0, 1, 3])
def test_disk_backward_after_the_block_works_as_with_save_on_cpu(prefetch, tmp_path):
    model = _model("cpu")
    x, y = _batch("cpu")
    with offload.save_on_disk(str(tmp_path), prefetch=prefetch) as ctx:
        loss = F.cross_entropy(model(x), y)
    assert len(os.listdir(ctx.path)) > 0  # the files wait for backward...
    assert _offload_threads() == []  # ...but no thread outlives the block
    loss.backward()
    assert os.listdir(tmp_path) == []  # each file went once used, the folder with the last
    assert memory.live_bytes("activation", "disk") == 0
    for a, p in zip(_plain_grads(), model.parameters()):
        assert np.array_equal(a, p.grad.numpy())


def test_a_graph_dropped_without_backward_takes_its_files_with_it(tmp_path):
    model = _model("cpu")
    x, y = _batch("cpu")
    with offload.save_on_disk(str(tmp_path)):
        loss = F.cross_entropy(model(x), y)
    assert os.listdir(tmp_path) != []
    del loss
    assert os.listdir(tmp_path) == []
    assert memory.live_bytes("activation", "disk") == 0


@pytest.mark.parametrize("make", [offload.save_on_host, offload.save_on_disk])
def test_one_context_entered_twice_gives_each_graph_its_own_tensors(make, tmp_path):
    model = _model("cpu")
    x, y = _batch("cpu")
    x2 = tm.tensor(x.numpy()[::-1].copy(), device=x.device)
    ctx = make(prefetch=2) if make is offload.save_on_host else make(str(tmp_path), prefetch=2)
    with ctx:
        first = F.cross_entropy(model(x), y)
    with ctx:
        second = F.cross_entropy(model(x2), y)
    first.backward()  # must read the first block's tensors, not the second's
    got = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    second.backward()
    assert all(np.array_equal(a, b) for a, b in zip(_plain_grads(), got))
    assert os.listdir(tmp_path) == []


_INTERRUPTED = """
import sys
import numpy as np
import tinymem as tm
import tinymem.functional as F
from tinymem.autograd import Function
from tinymem.techniques import offload

class Interrupt(Function):
    def forward(ctx, x):
        return x
    def backward(ctx, g):
        raise KeyboardInterrupt

model = tm.models.MLP([8, 16, 16, 4])
x = tm.tensor(np.ones((4, 8), np.float32))
with offload.save_on_disk(sys.argv[1]) as ctx:
    loss = F.cross_entropy(model[1:](Interrupt.apply(model[0](x))), np.zeros(4, np.int64))
print(len(__import__("os").listdir(ctx.path)), flush=True)
KEEP = loss  # a live graph at exit, its files still on disk
if sys.argv[2] == "interrupt":
    loss.backward()  # Ctrl-C half way through backward, after the block
"""


@pytest.mark.parametrize("end", ["interrupt", "exit"])
def test_files_of_a_live_graph_are_removed_at_interpreter_exit(end, tmp_path):
    root = os.path.dirname(os.path.dirname(os.path.abspath(tm.__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    done = subprocess.run([sys.executable, "-c", _INTERRUPTED, str(tmp_path), end], env=env,
                          capture_output=True, text=True, timeout=120)
    assert int(done.stdout.split()[0]) > 0, done.stderr  # files existed after the block
    assert (done.returncode != 0) == (end == "interrupt"), done.stderr
    assert os.listdir(tmp_path) == []


class _Explode(Function):
    """Identity whose backward raises, to interrupt a backward half way."""

    def forward(ctx, x, exc=RuntimeError):
        ctx.exc = exc
        return x

    def backward(ctx, g):
        raise ctx.exc("boom in backward")


class _ScaleBy(Function):
    """x * s for a 0-d s, checking that the saved s comes back 0-d (and x non-contiguous)."""

    def forward(ctx, x, s):
        ctx.save_for_backward(x, s)
        return x * s

    def backward(ctx, g):
        x, s = ctx.saved_tensors
        assert s.shape == () and x.shape == g.shape
        return g * s, (g * x).sum()


@pytest.mark.parametrize("make", [offload.save_on_host, offload.save_on_disk])
def test_shapes_and_layouts_come_back_unchanged(make):
    x = tm.tensor(np.arange(12, dtype=np.float32).reshape(3, 4).T, requires_grad=True)  # a transposed view
    s = tm.tensor(np.array(2.0, np.float32), requires_grad=True)
    with make():
        _ScaleBy.apply(x, s).sum().backward()
    assert s.grad.shape == () and s.grad.item() == x.numpy().sum()
    assert np.array_equal(x.grad.numpy(), np.full((4, 3), 2.0, np.float32))


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_no_file_left_after_an_exception_mid_backward(exc, tmp_path):
    model = _model("cpu")
    x, y = _batch("cpu")
    with pytest.raises(exc):
        with offload.save_on_disk(str(tmp_path), prefetch=2) as ctx:
            h = _Explode.apply(model[0](x), exc=exc)
            loss = F.cross_entropy(model[1:](h), y)
            assert len(os.listdir(ctx.path)) > 0
            loss.backward()
    assert os.listdir(tmp_path) == []
    del loss
    assert memory.live_bytes("activation", "disk") == 0


@pytest.mark.parametrize("damage", ["truncate", "delete", "grow"])
def test_damaged_file_raises_an_error_naming_it(damage, tmp_path):
    model = _model("cpu")
    x, y = _batch("cpu")
    with offload.save_on_disk(str(tmp_path), prefetch=0) as ctx:
        loss = F.cross_entropy(model(x), y)
        path = os.path.join(ctx.path, sorted(os.listdir(ctx.path))[-1])  # needed first
        if damage == "delete":
            os.unlink(path)
        else:
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                f.truncate(size // 2 if damage == "truncate" else size + 4)
        with pytest.raises(OffloadError) as info:
            loss.backward()
        assert path in str(info.value)
        assert ("missing" if damage == "delete" else "truncated or corrupted") in str(info.value)
    del loss, info  # the graph (and the traceback holding it) owned the files not yet read
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_a_prefetched_damaged_file_raises_in_the_main_thread(tmp_path):
    model = _model("cpu")
    x, y = _batch("cpu")
    with offload.save_on_disk(str(tmp_path), prefetch=4) as ctx:
        loss = F.cross_entropy(model(x), y)
        path = os.path.join(ctx.path, sorted(os.listdir(ctx.path))[-3])
        with open(path, "r+b") as f:
            f.truncate(3)
        with pytest.raises(OffloadError, match=os.path.basename(path)):
            loss.backward()


def test_bad_arguments_are_explained(tmp_path):
    with pytest.raises(OffloadError, match="does not exist"):
        with offload.save_on_disk(str(tmp_path / "nowhere")):
            pass
    with pytest.raises(ValueError, match="prefetch"):
        offload.save_on_disk(prefetch=-1)


def test_default_directory_is_the_system_temporary_directory():
    import tempfile
    with offload.save_on_disk() as ctx:
        assert os.path.dirname(ctx.path) == tempfile.gettempdir()
        path = ctx.path
    assert not os.path.exists(path)


def test_bandwidths_are_measured_and_predict_time():
    bw = offload.measure_bandwidths(chunk_bytes=1 << 16, total_bytes=1 << 20, repeats=1)
    assert all(bw[k] > 0 for k in ("memcpy", "disk_write", "disk_read"))
    assert offload.predicted_seconds(1.0, 0, 0, bw, "disk") == 1.0
    expected = 1.0 + 100 / bw["disk_write"] + 50 / bw["disk_read"]
    assert offload.predicted_seconds(1.0, 100, 50, bw, "disk") == pytest.approx(expected)
