"""Checks for lesson 9's exercises. Each check is a function of the exercise module, so that
tests/exercises/test_ex09_wrong.py can prove that plausible wrong answers fail them."""
import gc

import numpy as np
import pytest
from exercise_checks import forbidding

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, planner
from tinymem.experiments import sharing_jobs

pytestmark = [pytest.mark.exercise_09, pytest.mark.whole_heap]  # find_leaks: see conftest


def _mlp(sizes=(16, 32, 4), batch=16, seed=0):
    tm.manual_seed(seed)
    model = tm.models.MLP(list(sizes))
    x = tm.tensor(np.random.default_rng(seed).standard_normal((batch, sizes[0])).astype(np.float32))
    return model, x, np.arange(batch) % sizes[-1]


def check_leaked_bytes_per_step(ex):
    model, x, y = _mlp()
    opt = tm.optim.Adam(model.parameters())

    def clean():  # Adam creates its state in the first step: that is not a leak
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    kept, total, rows = [], [], iter([1, 2, 3, 5, 8, 13])

    def keeps_hidden():
        clean()
        kept.append(model[:2](x))  # one (16, 32) float32 activation per step

    def keeps_more_each_step():  # 1 row in the warm-up, then 2, 3 and 5 rows of 32 float32
        kept.append(model[:2](x[:next(rows)]))

    def evaluates():
        total.append(F.cross_entropy(model(x), y))  # gradients on, no backward: graphs pile up

    def keeps_on_the_host():  # 100 float32 held in host memory each step, as a replay buffer is
        kept.append(memory.register(np.zeros(100, np.float32), "workspace", place="host"))

    def leaves_cyclic_garbage():  # a cycle the collector frees: no leak once garbage is collected
        cycle = [model[:2](x)]
        cycle.append(cycle)

    expected = memory.find_leaks(evaluates, steps=4)[0].bytes_per_step
    with forbidding(memory.find_leaks):
        assert ex.leaked_bytes_per_step(clean) == 0
        assert ex.leaked_bytes_per_step(keeps_hidden) == 16 * 32 * 4
        assert ex.leaked_bytes_per_step(evaluates) == expected
        assert ex.leaked_bytes_per_step(keeps_more_each_step, steps=3) == pytest.approx((2 + 3 + 5) * 32 * 4 / 3)
        assert ex.leaked_bytes_per_step(keeps_on_the_host) == 400
        collecting = gc.isenabled()
        gc.disable()  # the cycle must be left to the answer's own collection, not to chance
        try:
            assert ex.leaked_bytes_per_step(leaves_cyclic_garbage) == 0
        finally:
            if collecting:
                gc.enable()


def check_logged_step(ex):
    model, x, y = _mlp()
    reference, _, _ = _mlp()
    opt, ref_opt = tm.optim.SGD(model.parameters(), lr=0.1), tm.optim.SGD(reference.parameters(), lr=0.1)
    log, ref_log = [], []
    for _ in range(3):
        ex.logged_step(model, opt, x, y, log)
        reference.zero_grad()
        loss = F.cross_entropy(reference(x), y)
        loss.backward()
        ref_opt.step()
        ref_log.append(loss.item())
    assert all(type(v) is float for v in log), [type(v) for v in log]
    assert log == ref_log
    for p, q in zip(model.parameters(), reference.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    leaks = memory.find_leaks(lambda: ex.logged_step(model, opt, x, y, log), steps=4)
    assert leaks == [], "\n".join(map(str, leaks))


def check_activation_bytes_by_module(ex):
    model, x, y = _mlp((8, 16, 16, 4), batch=5)
    with memory.track() as t:
        loss = F.cross_entropy(model(x), y)
    got = ex.activation_bytes_by_module(t, 1)
    # The first ReLU's output (5, 16) is saved (once, though the next Linear saves it too) and
    # stays saved until backward; the input x (5, 8) was made outside the model.
    assert got["1"] == 5 * 16 * 4 and got["(no module: activation)"] >= 5 * 8 * 4, got
    assert sum(got.values()) == t.peak_by_bucket()["activation"], (got, t.peak_by_bucket())
    del loss
    work = planner.workload("transformer", "32,16,16,2,2")
    lm = work.build("none")
    with memory.track() as t:
        loss = work.loss(lm, work.batch(4))
    deep, shallow = ex.activation_bytes_by_module(t, 2), ex.activation_bytes_by_module(t, 1)
    assert sum(deep.values()) == sum(shallow.values()) == t.peak_by_bucket()["activation"]
    assert deep["blocks.0"] == deep["blocks.1"] > 0
    assert shallow["blocks"] == deep["blocks.0"] + deep["blocks.1"]
    del loss


def check_micro_batches_for(ex):
    peaks = {8: 35, 1: 100, 4: 40, 2: 60}
    assert ex.micro_batches_for(peaks, 100, 0.5) == 4
    assert ex.micro_batches_for(peaks, 100, 0.6) == 2  # a peak equal to the share fits
    assert ex.micro_batches_for(peaks, 100, 1.0) == 1
    assert ex.micro_batches_for(peaks, 100, 0.3) is None
    # Peaks need not fall with k (a second micro-batch's buffers, an uneven split): the fewest
    # micro-batches that fit is not the largest peak that fits, nor the smallest peak.
    assert ex.micro_batches_for({1: 100, 2: 45, 4: 48, 8: 30}, 100, 0.5) == 2
    # Two real processes, each capped at half of a device one job alone nearly fills.
    spec = {"sizes": [64, 128, 128, 10], "batch": 768, "steps": 3}
    measured = {k: sharing_jobs.step_peak(dict(spec, seed=0), k) for k in (1, 2, 4, 8)}
    peak, floor = measured[1]
    spec["budget"] = peak + floor // 2
    k = ex.micro_batches_for({k: p for k, (p, _) in measured.items()}, spec["budget"], 0.5)
    assert k is not None
    runs = sharing_jobs.run_scenario("fractions", spec, k)
    assert [r["status"] for r in runs] == ["done", "done"], [r["message"][:200] for r in runs]


def test_leaked_bytes_per_step(exercise):
    check_leaked_bytes_per_step(exercise("ex09"))


def test_logged_step(exercise):
    check_logged_step(exercise("ex09"))


def test_activation_bytes_by_module(exercise):
    check_activation_bytes_by_module(exercise("ex09"))


def test_micro_batches_for(exercise):
    check_micro_batches_for(exercise("ex09"))
