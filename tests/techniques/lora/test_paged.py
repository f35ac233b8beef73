"""The paged optimizer: an activation spike that runs out of memory completes once the state
can page to the host, with parameters bit for bit those of the unpaged run without a budget."""
import gc
import glob
import os
import tempfile
import uuid

import numpy as np
import pytest
from conftest import to_np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, nn, optim
from tinymem.memory.shared import SharedDevice
from tinymem.techniques.lora import apply_lora, paged, trainable_parameters


def _batch(rows, device, seed):
    return tm.tensor(np.random.default_rng(seed).standard_normal((rows, 64)).astype(np.float32), device=device)


def _train(device, budget=None, paging=False, shared=None, fraction=None):
    """One small step (makes the state), then, tracked under ``budget``: a spike (batch 512)
    and a small step again. Returns the adapters, the window's peak, what paged (None without
    paging) and the state's bytes; nothing else of the run survives it to count in the next."""
    gc.collect()
    tm.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64, device=device), nn.GELU(), nn.Linear(64, 64, device=device))
    apply_lora(model, r=32, alpha=32)
    inner = optim.Adam(trainable_parameters(model), lr=1e-2)
    opt = paged(inner) if paging else inner

    def step(x):
        opt.zero_grad()
        F.mse_loss(model(x), x).backward()
        opt.step()

    step(_batch(4, device, 0))
    try:
        with memory.track(budget=budget, measure=False, shared=shared, fraction=fraction) as t:
            step(_batch(512, device, 1))
            step(_batch(4, device, 2))
    finally:
        if paging:
            opt.close()
    return ([to_np(p).copy() for p in trainable_parameters(model)], t.peak(),
            opt.stats() if paging else None, inner.state_bytes())


def test_a_spike_that_runs_out_of_memory_completes_paged_and_bit_identical(device):
    expected, free_peak, _, state = _train(device)
    assert state == 4 * 2 * 2 * 32 * (64 + 64)  # Adam's two moments of A and B in two layers
    budget = free_peak - state // 2  # the unpaged step needs half the state more than this
    with pytest.raises(memory.OutOfMemoryError, match="budget"):
        _train(device, budget)
    got, peak, moved, _ = _train(device, budget, paging=True)
    assert peak <= budget
    assert moved["bytes_paged_out"] >= state // 2 and moved["bytes_paged_in"] == moved["bytes_paged_out"]
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_without_a_budget_nothing_pages_and_the_state_stays_on_the_device():
    _, _, moved, _ = _train("cpu", paging=True)
    assert moved == {"bytes_paged_out": 0, "bytes_paged_in": 0}
    assert memory.live_bytes("optimizer", "host") == 0


def test_paged_refuses_what_is_not_an_optimizer():
    with pytest.raises(TypeError, match="wraps a tinymem optimizer"):
        paged([nn.Linear(2, 2).weight])


@pytest.fixture
def shared_name():
    """A fresh shared-device name; its lock files are removed afterwards."""
    name = f"test-{uuid.uuid4().hex[:12]}"
    yield name
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"*{name}*")):
        os.remove(path)


@pytest.mark.parametrize("times,fraction", [(1, None), (2, 0.5)])
def test_on_a_shared_device_the_pagers_are_asked_as_under_a_private_budget(shared_name, times, fraction):
    """The same limit as a private budget: the whole shared device, or half of one twice as big."""
    expected, free_peak, _, state = _train("cpu")
    budget = free_peak - state // 2
    with pytest.raises(memory.OutOfMemoryError, match="shared device"):
        _train("cpu", times * budget, shared=shared_name, fraction=fraction)
    got, peak, moved, _ = _train("cpu", times * budget, paging=True, shared=shared_name, fraction=fraction)
    assert peak <= budget and moved["bytes_paged_out"] >= state // 2
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)



def test_with_room_on_the_shared_device_a_pager_costs_no_extra_look_at_it(shared_name, monkeypatch):
    """The pagers are asked only when the reservation fails: with room to spare, one lock per
    array, as without a pager (the device's process table was read before every allocation)."""
    reads = []
    original = SharedDevice.processes
    monkeypatch.setattr(SharedDevice, "processes", lambda self: reads.append(1) or original(self))
    opt = paged(optim.Adam(nn.Linear(4, 4).parameters()))
    try:
        with memory.track(budget="64MB", measure=False, shared=shared_name):
            arrays = [memory.register(np.zeros(64, np.uint8), "workspace") for _ in range(50)]
    finally:
        opt.close()
    assert len(arrays) == 50 and reads == []

def test_a_sparse_gradient_is_refused_as_plain_adam_refuses_it():
    dense, table = nn.Linear(4, 4), nn.EmbeddingBag(10, 4, sparse=True)
    opt = paged(optim.Adam(dense.parameters() + table.parameters()))
    dense(table(tm.tensor(np.array([[1, 3]])))).sum().backward()
    before = [to_np(p).copy() for p in opt.param_groups[0]["params"]]
    with pytest.raises(TypeError, match="paged Adam does not take sparse gradients.*sparse=False"):
        opt.step()
    for p, b in zip(opt.param_groups[0]["params"], before):  # the dense ones before it too
        np.testing.assert_array_equal(to_np(p), b)
    opt.close()


class _NoPageOut:
    pass


@pytest.mark.parametrize("pager", [5, _NoPageOut(), "page_out"])
def test_add_pager_refuses_what_cannot_page_out_at_registration(pager):
    with pytest.raises(TypeError, match=r"add_pager takes an object with a page_out\(nbytes\) method"):
        memory.add_pager(pager)
    assert pager not in [ref() for ref in memory.LEDGER.pagers]
