"""The ring algorithm in one process: ``ring.simulate`` runs one thread per rank, queues for wires.

No MPI is needed, so every ring size and buffer size is cheap to try; the same functions run
over ``MPI.Sendrecv`` in the MPI tests (test_distributed.py).
"""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tinymem import memory
from tinymem.distributed import ring
from tinymem.distributed.ring_tasks import rank_inputs, sum_in_ring_order


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("numel", [1, 4, 7, 60, 1001])
def test_all_reduce_is_the_sum_in_the_stated_order_with_the_formula_bytes(world_size, numel):
    inputs = rank_inputs(world_size, numel, seed=3)
    calls = [0] * world_size

    def body(rank, exchange):
        def counted(send, recv):
            calls[rank] += 1
            exchange(send, recv)
        return ring.all_reduce(inputs[rank].copy(), rank, world_size, counted)

    results, sent = ring.simulate(world_size, body)
    expected = sum_in_ring_order(inputs)
    for r in range(world_size):
        np.testing.assert_array_equal(results[r], expected)  # bit for bit, every rank
    np.testing.assert_allclose(results[0], inputs.sum(axis=0), rtol=1e-13, atol=1e-13)
    formula = ring.ring_bytes("all_reduce", numel, 8, world_size)
    assert sent == [formula] * world_size
    assert calls == [2 * (world_size - 1)] * world_size


def test_sum_in_ring_order_differs_from_the_plain_sum_somewhere():
    """The stated order is a real constraint: for random float64 data it is not rank order."""
    inputs = rank_inputs(4, 1000, seed=0)
    assert not np.array_equal(sum_in_ring_order(inputs), inputs[0] + inputs[1] + inputs[2] + inputs[3])


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_reduce_scatter_and_all_gather(world_size):
    block = 5
    inputs = rank_inputs(world_size, world_size * block, seed=1)

    def body(rank, exchange):
        blocks = inputs[rank].copy().reshape(world_size, block)
        mine = ring.reduce_scatter(blocks, rank, exchange).copy()
        gathered = np.zeros((world_size, block))
        gathered[rank] = mine
        ring.all_gather(gathered, rank, exchange)
        return mine, gathered

    results, sent = ring.simulate(world_size, body)
    expected = sum_in_ring_order(inputs).reshape(world_size, block)
    for rank, (mine, gathered) in enumerate(results):
        np.testing.assert_array_equal(mine, expected[rank])
        np.testing.assert_array_equal(gathered, expected)
    one_pass = ring.ring_bytes("reduce_scatter", world_size * block, 8, world_size)
    assert one_pass == ring.ring_bytes("all_gather", world_size * block, 8, world_size)
    assert sent == [2 * one_pass] * world_size


def test_max_and_the_padded_copy_leave_the_caller_unchanged_beyond_its_size():
    inputs = -np.abs(rank_inputs(3, 7, seed=2))  # all negative: the zero padding must not leak in
    results, _ = ring.simulate(3, lambda r, ex: ring.all_reduce(inputs[r].copy(), r, 3, ex, op="max"))
    for result in results:
        np.testing.assert_array_equal(result, inputs.max(axis=0))


def test_temporaries_are_counted_as_workspace():
    inputs = rank_inputs(2, 7, seed=4)
    with memory.track() as t:
        ring.simulate(2, lambda r, ex: ring.all_reduce(inputs[r].copy(), r, 2, ex))
    # two ranks in one process: two padded copies (2 x 4 x 8 B) and two receive blocks (2 x 4 x 8 B)
    assert t.max_by_bucket()["workspace"] >= 2 * 4 * 8, memory.format_table(t.max_by_bucket(), "ring")


@settings(max_examples=25, deadline=None)
@given(world_size=st.integers(1, 6), numel=st.integers(1, 200), seed=st.integers(0, 10**6))
def test_all_reduce_property(world_size, numel, seed):
    inputs = rank_inputs(world_size, numel, seed)
    results, sent = ring.simulate(world_size, lambda r, ex: ring.all_reduce(inputs[r].copy(), r, world_size, ex))
    assert all(np.array_equal(res, sum_in_ring_order(inputs)) for res in results)
    assert sent == [2 * (world_size - 1) * -(-numel // world_size) * 8] * world_size


def test_a_rank_that_fails_is_reported():
    def body(rank, exchange):
        if rank == 1:
            raise RuntimeError("rank 1 broke")
        return ring.all_gather(np.zeros((2, 3)), rank, exchange)

    with pytest.raises(RuntimeError, match="rank 1 broke"):
        ring.simulate(2, body, timeout=1)


def test_bad_input_says_what_to_do():
    with pytest.raises(ValueError, match="reshape"):
        ring.reduce_scatter(np.zeros(8), 0, None)
    with pytest.raises(ValueError, match="not in a ring"):
        ring.all_gather(np.zeros((2, 3)), 2, None)
    with pytest.raises(ValueError, match="flat"):
        ring.all_reduce(np.zeros((2, 3)), 0, 2, None)


@pytest.mark.parametrize("device", ["cpu", "standin"], indirect=True)
def test_address_tells_where_a_view_starts_on_either_device(device):
    """all_gather skips its copy when a rank's block already is its shard: ``address`` read
    ``array.data.ptr``, which only CuPy has; the stand-in's arrays failed there."""
    from tinymem import backend
    from tinymem.distributed.flat import address
    a = backend.to_device(np.arange(10, dtype=np.float32), device)
    assert address(a[2:]) - address(a) == 8 and address(a[2:]) == address(a[2:4])
