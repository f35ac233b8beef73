"""Checks for lesson 1: checkpointing's peak by formula, revolve's cost, a checkpoint of your own."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.techniques import checkpoint as ckpt
from tinymem.techniques.checkpoint import segments
from tinymem.techniques.checkpoint.revolve import revolve

pytestmark = pytest.mark.exercise_01

SCHEDULERS = (ckpt.predict_segments, ckpt.predict_revolve, ckpt.profile_layers, ckpt.candidate_plans,
              ckpt.choose_schedule)


@pytest.mark.parametrize("n,k", [(16, 1), (16, 4), (16, 5), (10, 3), (9, 9), (10, 4), (16, 6), (7, 2)])
def test_segment_peak_matches_the_ledger(exercise, forbid, n, k):
    tm.manual_seed(0)
    model = tm.nn.Sequential(*[tm.nn.Sequential(tm.nn.Linear(8, 8), tm.nn.ReLU()) for _ in range(n)])
    x = tm.randn(4, 8, requires_grad=True)
    with memory.track(measure=False) as t:
        ckpt.checkpoint_sequential(model, k, x).backward(np.ones((4, 8), np.float32))
    forbid(*SCHEDULERS)
    assert exercise("ex01").segment_peak_states(n, k) * x.nbytes == t.max_by_bucket()["activation"]


def test_revolve_forwards(exercise, forbid):
    expected = {(n, s): revolve(n, s).forwards for n in range(1, 40) for s in range(1, 6)}
    forbid(ckpt.revolve, ckpt.binomial_forwards, ckpt.repetitions, ckpt.checkpoint_revolve, *SCHEDULERS)
    mod = exercise("ex01")
    assert mod.revolve_forwards(64, 4) == 200 and mod.revolve_forwards(64, 8) == 137
    for (n, s), forwards in expected.items():
        assert mod.revolve_forwards(n, s) == forwards, (n, s)


def test_checkpoint_one_is_exact_and_keeps_only_its_input(exercise, forbid):
    w = np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32)
    calls = []

    def f(h):
        calls.append(tm.autograd.is_recomputing())
        return F.dropout((h @ tm.tensor(w)).tanh(), 0.5)

    def run(step):
        x = tm.tensor(x0, requires_grad=True)
        tm.manual_seed(7)
        out = step(x)
        between = tm.rand(3).numpy()  # the RNG moves on between forward and backward
        held = memory.live_bytes("activation")
        out.sum().backward()
        return x.grad.numpy(), between, tm.rand(3).numpy(), held

    x0 = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    expected, between, after, _ = run(f)
    calls.clear()
    forbid(ckpt.checkpoint, ckpt.checkpoint_sequential, ckpt.CheckpointFunction, ckpt.checkpoint_revolve,
           segments.replay, segments.record, segments.backprop, segments.Segment)
    grad, between_ck, after_ck, held = run(lambda x: exercise("ex01").checkpoint_one(f, x))
    assert held == x0.nbytes, "keep only x for backward"
    assert calls == [False, True], "run the function twice, the second time marked as a recomputation"
    assert np.array_equal(grad, expected), "the recomputation must replay the forward's random draws"
    assert np.array_equal(between_ck, between) and np.array_equal(after_ck, after), \
        "give the RNG back its state after the recomputation"
