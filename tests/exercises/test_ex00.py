"""Checks for lesson 0: the buckets of an MLP against the ledger, a window replayed by hand."""
import numpy as np
import pytest

import tinymem as tm
import tinymem.functional as F
from tinymem import memory

pytestmark = pytest.mark.exercise_00


@pytest.mark.parametrize("sizes", [[4, 3], [64, 128, 10], [10, 20, 30, 5]])
def test_parameter_bytes(exercise, sizes):
    model = tm.models.MLP(sizes)
    assert exercise("ex00").mlp_parameter_bytes(sizes) == sum(p.nbytes for p in model.parameters())
    assert exercise("ex00").mlp_parameter_bytes(sizes, 2) == sum(p.nbytes for p in model.parameters()) // 2


@pytest.mark.parametrize("sizes,batch", [([8, 16, 4], 3), ([20, 30, 30, 10], 7)])
def test_activation_bytes_match_the_ledger(exercise, sizes, batch):
    model = tm.models.MLP(sizes)
    before = memory.live_bytes("activation")
    loss = F.cross_entropy(model(tm.tensor(np.ones((batch, sizes[0]), np.float32))), np.zeros(batch, np.int64))
    assert exercise("ex00").mlp_activation_bytes(sizes, batch) == memory.live_bytes("activation") - before
    del loss


def _window(run):
    start = memory.LEDGER.by_bucket()
    with memory.track(measure=False) as t:
        run()
    timeline = t.timeline()
    events = [{k: e[k] for k in ("kind", "bucket", "bytes", "label")} for e in timeline]
    first = next(i for i, e in enumerate(timeline) if e["kind"] != "mark" and sum(e["live"].values()) == t.peak())
    phase = [e["label"] for e in timeline[:first + 1] if e["kind"] == "mark"][-1]
    return start, events, (t.peak(), t.peak_by_bucket(), phase), t


def test_replay_finds_the_peak_of_a_training_step(exercise):
    model = tm.models.MLP([16, 64, 64, 4])
    opt = tm.optim.Adam(model.parameters())
    x, y = tm.tensor(np.ones((32, 16), np.float32)), tm.tensor(np.zeros(32, np.int64))

    def step():
        memory.mark("forward")
        loss = F.cross_entropy(model(x), y)
        memory.mark("backward")
        loss.backward()
        opt.step()

    start, events, expected, t = _window(step)
    # the peak is not the sum of each bucket's own maximum: they come at different times
    assert sum(t.max_by_bucket().values()) > t.peak()
    assert exercise("ex00").replay_peak(start, events) == expected


def test_replay_takes_the_first_moment_of_the_peak(exercise):
    start = {"parameter": 100, "gradient": 0, "optimizer": 0, "activation": 0, "workspace": 0}
    events = [{"kind": "mark", "bucket": None, "bytes": 0, "label": "forward"},
              {"kind": "alloc", "bucket": "activation", "bytes": 50, "label": None},
              {"kind": "mark", "bucket": None, "bytes": 0, "label": "backward"},
              {"kind": "free", "bucket": "activation", "bytes": 50, "label": None},
              {"kind": "alloc", "bucket": "gradient", "bytes": 50, "label": None},
              {"kind": "free", "bucket": "gradient", "bytes": 20, "label": None},
              {"kind": "mark", "bucket": None, "bytes": 0, "label": "optimizer"}]
    peak, at_peak, phase = exercise("ex00").replay_peak(start, events)
    assert (peak, phase) == (150, "forward")
    assert at_peak == dict(start, activation=50)
    assert exercise("ex00").replay_peak(start, events[:1]) == (100, start, None)
