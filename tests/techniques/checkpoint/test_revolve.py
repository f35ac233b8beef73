"""revolve: the schedule is optimal (brute force and formula), valid, and exact when run."""
import inspect
import tracemalloc
from functools import lru_cache

import numpy as np
import pytest
from _ckpt_models import Counted, RunningMean, assert_identical, mlp, step_grads

import tinymem as tm
from tinymem.memory.ledger import OutOfMemoryError
from tinymem.techniques.checkpoint.revolve import actions, binomial_forwards, checkpoint_revolve, revolve


@lru_cache(maxsize=None)
def brute_force(l, s):
    """Fewest forwards by exhaustive search over the first snapshot position (independent DP)."""
    if l == 1:
        return 0
    if s == 1:
        return sum(range(l))  # advance from x_0 to every x_i again
    return min(j + brute_force(l - j, s - 1) + brute_force(j, s) for j in range(1, l))


def simulate(schedule):
    """Run a schedule on symbols; check it reverses every step in order with the slots it has."""
    n, slots = schedule.n_steps, schedule.slots
    kept, current, reversed_down_to, forwards = {}, 0, n, 0
    for a in schedule:
        if a.kind == "snapshot":
            assert a.step == current and len(kept) < slots, a
            kept[a.step] = True
        elif a.kind == "advance":
            assert a.step == current and a.end < reversed_down_to, a
            forwards += a.end - a.step
            current = a.end
        elif a.kind == "restore":
            assert a.step in kept, a
            current = a.step
        elif a.kind == "free":
            del kept[a.step]
        elif a.kind == "backward":
            assert a.step == current == reversed_down_to - 1, a
            reversed_down_to, current = a.step, None
    assert reversed_down_to == 0 and not kept
    return forwards


def test_formula_values_from_the_issue():
    assert binomial_forwards(64, 4) == 200
    assert binomial_forwards(64, 8) == 137
    assert binomial_forwards(10, 1) == 45


def test_schedule_is_optimal_and_valid_for_all_small_cases():
    for l in range(1, 61):
        for s in range(1, 7):
            schedule = revolve(l, s)
            assert simulate(schedule) == schedule.forwards == binomial_forwards(l, s) == brute_force(l, s), (l, s)
            assert schedule.max_slots_used() <= s


@pytest.mark.parametrize("slots", [1, 2, 3, 5, 17])
def test_revolve_gradients_bit_identical(device, slots):
    model = mlp(device)
    ref = step_grads(model, lambda m, x: m(x), device)
    got = step_grads(model, lambda m, x: checkpoint_revolve(m, slots, x), device)
    assert_identical(ref, got)


@pytest.mark.parametrize("slots", [1, 2, 4])
def test_forward_calls_equal_taped_plus_formula(slots):
    log = []
    n = 12
    layers = [Counted(tm.nn.Linear(4, 4), i, log) for i in range(n)]
    checkpoint_revolve(layers, slots, tm.randn(2, 4, requires_grad=True)).sum().backward()
    assert len(log) == n + binomial_forwards(n, slots)


def test_running_statistics_updated_once_per_layer():
    stats = [RunningMean() for _ in range(3)]
    layers = [m for s in stats for m in (tm.nn.Linear(4, 4), s)]
    checkpoint_revolve(layers, 2, tm.randn(2, 4, requires_grad=True)).sum().backward()
    assert [s.updates for s in stats] == [1, 1, 1]


def test_no_grad_runs_plainly():
    log = []
    layers = [Counted(tm.nn.Linear(4, 4), i, log) for i in range(5)]
    with tm.no_grad():
        out = checkpoint_revolve(layers, 2, tm.randn(2, 4, requires_grad=True))
    assert not out.requires_grad and log == [0, 1, 2, 3, 4]


def test_second_backward_is_a_clear_error():
    out = checkpoint_revolve([tm.nn.Linear(4, 4) for _ in range(4)], 2, tm.randn(2, 4, requires_grad=True))
    loss = out.sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_snapshots_released_when_graph_dropped():
    before = tm.memory.live_bytes("activation")
    out = checkpoint_revolve([tm.nn.Linear(4, 4) for _ in range(6)], 3, tm.randn(2, 4, requires_grad=True))
    assert tm.memory.live_bytes("activation") > before
    del out
    assert tm.memory.live_bytes("activation") == before


@pytest.mark.parametrize("args", [(0, 2), (4, 0), (3, 1.5)])
def test_bad_arguments(args):
    with pytest.raises(ValueError, match="positive int"):
        revolve(*args)


def test_layer_that_ignores_its_input_and_changes_width():
    """After a layer whose output does not depend on its input, the earlier layers get a zero
    gradient of their own shape (3 wide, not the 5 of the later states)."""
    const = tm.nn.Linear(3, 5)
    layers = [tm.nn.Linear(4, 3), tm.nn.Tanh(), lambda h: const(tm.ones(2, 3)), tm.nn.Linear(5, 2)]

    def grads(run):
        x = tm.tensor(np.ones((2, 4), np.float32), requires_grad=True)
        for layer in (layers[0], layers[3], const):
            layer.zero_grad()
        run(x).sum().backward()
        return x, [const.weight.grad.numpy(), layers[3].weight.grad.numpy()]

    _, ref = grads(lambda x: layers[3](layers[2](layers[1](layers[0](x)))))
    x, got = grads(lambda x: checkpoint_revolve(layers, 2, x))
    assert_identical(ref, got)
    assert x.grad is None or not x.grad.numpy().any()


def test_actions_are_the_schedule_made_one_at_a_time():
    for l, s in ((1, 1), (7, 1), (40, 3), (100, 4)):
        assert list(actions(l, s)) == list(revolve(l, s))
    with pytest.raises(ValueError, match="positive int"):
        actions(4, 0)  # refused when called, not when first iterated


def _kept_between_forward_and_backward(blocks):
    """Bytes allocated under revolve's frames and still alive after its forward (the ledger's
    own table of live arrays left out: it grows with the parameters, not with revolve)."""
    tm.manual_seed(0)
    layers = [m for _ in range(blocks) for m in (tm.nn.Linear(4, 4), tm.nn.Dropout(0.25))]
    x = tm.randn(2, 4, requires_grad=True)
    tracemalloc.start(30)
    try:
        out = checkpoint_revolve(layers, 3, x)
        snapshot = tracemalloc.take_snapshot().filter_traces([
            tracemalloc.Filter(True, inspect.getfile(checkpoint_revolve), all_frames=True),
            tracemalloc.Filter(False, inspect.getfile(OutOfMemoryError))])
    finally:
        tracemalloc.stop()
    out.sum().backward()
    return sum(stat.size for stat in snapshot.statistics("filename"))


def test_bookkeeping_does_not_grow_with_the_depth():
    """The schedule is made as it runs and each slot keeps its RNG state: what revolve holds
    between forward and backward is O(slots). A precomputed list of actions and an RNG state
    per layer held ~1 KB per block here; what is left per block is the graph's edge to each
    parameter and the list of layers (a few pointers)."""
    per_block = (_kept_between_forward_and_backward(256) - _kept_between_forward_and_backward(32)) / (256 - 32)
    assert per_block < 128, per_block
