"""The host buffer pool behind save_on_host: reuse across steps, exact gradients, no reuse while
a graph or a view still reads a buffer, and the ledger's host bytes as pool.py documents them."""
import gc

import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.techniques import offload
from tinymem.techniques.offload import HOST_POOL, HostPool


def _model(device):
    tm.manual_seed(0)
    return tm.models.MLP([48, 64, 64, 10], activation="tanh").to(device)


def _batch(device, n=32, seed=0):
    rng = np.random.default_rng(seed)
    x = tm.tensor(rng.standard_normal((n, 48)).astype(np.float32), device=device)
    return x, tm.tensor(rng.integers(0, 10, n), device=device)


def _grads(model):
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    model.zero_grad()
    return grads


def _plain_grads(device, batch):
    model = _model(device)
    F.cross_entropy(model(batch[0]), batch[1]).backward()
    return _grads(model)


def _same(a, b):
    return all(np.array_equal(u, v) for u, v in zip(a, b))


def _host_table():
    return memory.format_table(memory.LEDGER.by_bucket("host"))


@pytest.fixture(autouse=True)
def _empty_pool():
    gc.collect()
    offload.empty_host_pool()
    yield
    gc.collect()
    offload.empty_host_pool()


def test_a_second_step_allocates_no_host_buffer_and_the_ledger_counts_the_pool(device):
    model, (x, y) = _model(device), _batch(device)
    saved = sum(offload.saved_schedule(lambda: F.cross_entropy(model(x), y)))
    for step in range(3):
        with offload.save_on_host():
            loss = F.cross_entropy(model(x), y)
            # Lent: the saved bytes, counted once, as activations at the host.
            assert memory.live_bytes("activation", "host") == HOST_POOL.lent_bytes == saved, _host_table()
            assert memory.live_bytes("workspace", "host") == HOST_POOL.idle_bytes == 0, _host_table()
            loss.backward()
            del loss
        if step == 0:
            made = HOST_POOL.allocations
        assert HOST_POOL.allocations == made  # later steps reuse every buffer
        # Idle: the same bytes, now in workspace at the host, waiting for the next step.
        assert memory.live_bytes("activation", "host") == HOST_POOL.lent_bytes == 0, _host_table()
        assert memory.live_bytes("workspace", "host") == HOST_POOL.idle_bytes == saved, _host_table()
        model.zero_grad()
    offload.empty_host_pool()
    assert memory.live_bytes(None, "host") == HOST_POOL.idle_bytes == 0, _host_table()


def test_reused_buffers_give_gradients_bit_identical_to_no_offload(device):
    batches = [_batch(device, seed=s) for s in range(3)]
    model = _model(device)
    before = HOST_POOL.allocations
    for i, (x, y) in enumerate(batches):
        with offload.save_on_host():
            F.cross_entropy(model(x), y).backward()
        assert _same(_grads(model), _plain_grads(device, (x, y))), f"step {i}"
    assert HOST_POOL.allocations - before == len(offload.saved_schedule(lambda: F.cross_entropy(model(x), y)))


def test_a_buffer_is_not_reused_while_a_graph_still_needs_it(device):
    model = _model(device)
    a, b, c = (_batch(device, seed=s) for s in range(3))
    before = HOST_POOL.allocations
    with offload.save_on_host():
        loss_a = F.cross_entropy(model(a[0]), a[1])
    loss_a.backward()
    got_a = _grads(model)
    del loss_a
    per_step = HOST_POOL.allocations - before
    with offload.save_on_host():
        loss_b = F.cross_entropy(model(b[0]), b[1])  # takes a's buffers back
    with offload.save_on_host():
        loss_c = F.cross_entropy(model(c[0]), c[1])  # b still holds them: new ones
    assert HOST_POOL.allocations - before == 2 * per_step
    loss_c.backward()
    got_c = _grads(model)
    loss_b.backward()
    got_b = _grads(model)
    for name, got, batch in [("a", got_a, a), ("b", got_b, b), ("c", got_c, c)]:
        assert _same(got, _plain_grads(device, batch)), name


def test_a_view_of_a_lent_array_keeps_its_buffer_out_of_the_pool():
    pool = HostPool()
    lent = pool.take(np.empty((8, 6), np.float32))
    view = lent[1:].T[::2]
    del lent
    assert pool.lent_bytes == 8 * 6 * 4 and pool.idle_bytes == 0
    again = pool.take(np.empty((8, 6), np.float32))  # must not be the buffer the view reads
    assert pool.allocations == 2 and not np.shares_memory(again, view)
    del view
    assert pool.lent_bytes == again.nbytes and pool.idle_bytes == again.nbytes
    pool.empty()
    assert pool.idle_bytes == 0


def test_the_pool_keeps_only_the_buffers_the_last_step_used():
    model = _model("cpu")
    sizes = {}
    for n in (32, 16, 16):
        x, y = _batch("cpu", n=n)
        sizes[n] = sum(offload.saved_schedule(lambda: F.cross_entropy(model(x), y)))
        with offload.save_on_host():
            F.cross_entropy(model(x), y).backward()
    # The third block began by freeing the batch-32 buffers that the second did not take.
    assert HOST_POOL.idle_bytes == memory.live_bytes("workspace", "host") == sizes[16], _host_table()


def test_an_exception_leaving_the_block_empties_the_pool(device):
    model, (x, y) = _model(device), _batch(device)
    with offload.save_on_host():
        F.cross_entropy(model(x), y).backward()
    assert HOST_POOL.idle_bytes > 0
    with pytest.raises(RuntimeError, match="boom"):
        with offload.save_on_host():
            loss = F.cross_entropy(model(x), y)
            raise RuntimeError("boom")
    assert HOST_POOL.idle_bytes == 0  # the idle buffers went at once...
    assert memory.live_bytes("activation", "host") > 0  # ...the failed graph still holds its own
    del loss
    gc.collect()
    assert HOST_POOL.idle_bytes == HOST_POOL.lent_bytes == 0  # ...and freed them when it died
    assert memory.live_bytes(None, "host") == 0, _host_table()
