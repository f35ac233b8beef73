"""Fault injection: an exception in a forward, a backward, an optimizer step, an offload write
or a save leaves the ledger exactly where it was, and no file or thread behind.

Each case builds its model and optimizer first, reads the ledger (every bucket, every place),
injects one exception at one place, drops what the failed call left (the exception and its
traceback hold the frames that hold the graph), and reads the ledger again.
"""
import errno
import gc
import os
import threading

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.autograd import Function
from tinymem.techniques import offload
from tinymem.techniques.offload import store


class _Injected(Exception):
    pass


class _FailForward(Function):
    def forward(ctx, x):
        raise _Injected("in forward")


class _FailBackward(Function):
    def forward(ctx, x):
        return x

    def backward(ctx, g):
        raise _Injected("in backward")


class _Wrap(tm.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn.apply(x)


def _threads():
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("tinymem"))


def _state(folder):
    gc.collect()
    offload.empty_host_pool()  # a cache of host buffers kept on purpose by earlier steps, not a leak
    return memory.live_bytes(None, None), _threads(), sorted(os.listdir(folder))


def _net(fault=None):
    tm.manual_seed(0)
    layers = [tm.nn.Linear(16, 32), tm.nn.ReLU(), tm.nn.Linear(32, 32), tm.nn.ReLU()]
    if fault is not None:
        layers.append(_Wrap(fault))
    return tm.nn.Sequential(*layers, tm.nn.Linear(32, 4))


def _batch():
    rng = np.random.default_rng(0)
    return tm.tensor(rng.standard_normal((8, 16)).astype(np.float32)), tm.tensor(rng.integers(0, 4, 8))


def _offload(kind, folder):
    return offload.save_on_disk(str(folder), prefetch=2) if kind == "disk" else offload.save_on_host()


@pytest.mark.parametrize("where", ["forward", "backward"])
@pytest.mark.parametrize("kind", ["plain", "host", "disk"])
def test_an_exception_in_forward_or_backward_leaves_the_ledger_as_it_was(where, kind, tmp_path):
    model = _net(_FailForward if where == "forward" else _FailBackward)
    x, y = _batch()
    before = _state(tmp_path)
    with pytest.raises(_Injected):
        if kind == "plain":
            F.cross_entropy(model(x), y).backward()
        else:
            with _offload(kind, tmp_path):
                F.cross_entropy(model(x), y).backward()
    # A backward stopped half way keeps the gradients it had already accumulated (as PyTorch
    # does); the zero_grad() that starts the next step frees them.
    model.zero_grad()
    assert _state(tmp_path) == before, memory.format_table(memory.LEDGER.by_bucket())


def test_an_exception_in_an_optimizer_step_leaves_the_ledger_as_it_was(tmp_path):
    model = _net()
    opt = tm.optim.Adam(model.parameters(), lr=1e-2)
    x, y = _batch()
    F.cross_entropy(model(x), y).backward()
    weights = [p.numpy().copy() for p in model.parameters()]
    before = _state(tmp_path)
    with pytest.raises(tm.OutOfMemoryError):
        with memory.track(budget=memory.live_bytes() + 3000, measure=False):
            opt.step()  # the first layer's exp_avg (2048 B) fits, its exp_avg_sq does not
    assert _state(tmp_path) == before, memory.format_table(memory.LEDGER.by_bucket())
    assert all(np.array_equal(w, p.numpy()) for w, p in zip(weights, model.parameters()))


def test_an_offload_write_that_fails_leaves_no_file_thread_or_bytes(tmp_path, monkeypatch):
    model = _net()
    x, y = _batch()
    real_open, calls = open, []

    def disk_full_at_the_third_file(path, mode="r", *args, **kwargs):
        if "w" in mode and str(path).endswith(".bin"):
            calls.append(path)
            if len(calls) == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(store, "open", disk_full_at_the_third_file, raising=False)
    before = _state(tmp_path)
    with pytest.raises(offload.OffloadError, match="No space left"):
        with offload.save_on_disk(str(tmp_path), prefetch=2):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
    assert len(calls) >= 3
    assert _state(tmp_path) == before, memory.format_table(memory.LEDGER.by_bucket())


def test_a_save_that_fails_half_way_leaves_the_old_file_and_nothing_else(tmp_path, monkeypatch):
    model = _net()
    path = tmp_path / "ckpt.npz"
    tm.save(model.state_dict(), path)
    old = path.read_bytes()

    def half_written(f, **members):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(np, "savez", half_written)
    before = _state(tmp_path)
    with pytest.raises(OSError):
        tm.save(model.state_dict(), path)
    assert _state(tmp_path) == before
    assert path.read_bytes() == old
