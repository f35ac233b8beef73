import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.techniques.checkpoint import checkpoint_sequential

pytestmark = pytest.mark.exercise_01


@pytest.mark.parametrize("n,k", [(16, 1), (16, 4), (16, 5), (10, 3), (9, 9)])
def test_segment_peak_matches_the_ledger(exercise, n, k):
    tm.manual_seed(0)
    model = tm.nn.Sequential(*[tm.nn.Sequential(tm.nn.Linear(8, 8), tm.nn.ReLU()) for _ in range(n)])
    x = tm.randn(4, 8, requires_grad=True)
    with memory.track(measure=False) as t:
        checkpoint_sequential(model, k, x).backward(np.ones((4, 8), np.float32))
    assert exercise("ex01").segment_peak_states(n, k) * x.nbytes == t.max_by_bucket()["activation"]


def test_revolve_forwards(exercise):
    from tinymem.techniques.checkpoint.revolve import revolve
    mod = exercise("ex01")
    assert mod.revolve_forwards(64, 4) == 200 and mod.revolve_forwards(64, 8) == 137
    for n in range(1, 30):
        for s in range(1, 5):
            assert mod.revolve_forwards(n, s) == revolve(n, s).forwards


def test_checkpoint_one_is_exact_and_keeps_only_its_input(exercise):
    w = np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32)
    calls = []

    def f(h):
        calls.append(1)
        return F.dropout((h @ tm.tensor(w)).tanh(), 0.5)

    x0 = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    x = tm.tensor(x0, requires_grad=True)
    tm.manual_seed(7)
    f(x).sum().backward()
    expected = x.grad.numpy()
    x = tm.tensor(x0, requires_grad=True)
    tm.manual_seed(7)
    calls.clear()
    out = exercise("ex01").checkpoint_one(f, x)
    assert memory.live_bytes("activation") == x.nbytes
    out.sum().backward()
    assert len(calls) == 2 and np.array_equal(x.grad.numpy(), expected)
