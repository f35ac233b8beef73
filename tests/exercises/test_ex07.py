"""Checks for lesson 7, and the wrong answers they must reject.

While an exercise runs, tinymem's own answers (the ZeRO calculator, the ring, the pipeline's
schedules and bubble) are replaced by functions that fail: the check sees the student's code,
not a call into the library. Expected values come from independent arithmetic here (closed
forms, plain sums, schedule rules), or from the library called by this file before and outside
the student's code.

Each file ``tests/exercises/wrong/ex07_*.py`` is a plausible mistake for one exercise (its
``TARGET``); ``test_wrong_answer_is_rejected`` runs that exercise's check on it and requires
a failure.
"""
import importlib.util
import pathlib
import sys

import numpy as np
import pytest

from tinymem.distributed import calculator, pipeline, ring, ring_tasks

pytestmark = pytest.mark.exercise_07

WRONG = sorted((pathlib.Path(__file__).parent / "wrong").glob("ex07_*.py"))
LIBRARY = [calculator.model_state_bytes, calculator.paper_table, calculator.traffic_bytes,
           ring.reduce_scatter, ring.all_gather, ring.all_reduce, ring.ring_bytes, ring.simulate,
           ring_tasks.sum_in_ring_order, pipeline.bubble_fraction, pipeline.schedule_order]
ONE_F_ONE_B = {(stage, stages, micro): pipeline.schedule_order("1f1b", stage, stages, micro)
               for stages, micro in [(2, 4), (4, 4), (4, 6), (4, 2), (3, 1)] for stage in range(stages)}


def _refuse(name):
    def refused(*args, **kwargs):
        raise AssertionError(f"the exercise called tinymem's {name}: build it yourself")
    return refused


@pytest.fixture
def library_off(monkeypatch):
    """Every binding of the library's answers, in every tinymem module, replaced by a refusal."""
    for module in [m for name, m in sys.modules.items() if name.startswith("tinymem") and m]:
        for attr, value in list(vars(module).items()):
            if any(value is f for f in LIBRARY):
                monkeypatch.setattr(module, attr, _refuse(f"{module.__name__}.{attr}"))


@pytest.fixture
def student(library_off, exercise):
    return exercise("ex07")


# -- the checks, one per exercise -------------------------------------------------------------
def check_zero_bytes_per_device(ex):
    gb = [ex.zero_bytes_per_device(7.5e9, 64, stage) / 1e9 for stage in range(4)]
    assert [round(g, 1) for g in gb] == [120.0, 31.4, 16.6, 1.9], gb
    for p, n in [(1000, 1), (1000, 4), (12, 3)]:
        expected = [16 * p, 4 * p + 12 * p / n, 2 * p + 14 * p / n, 16 * p / n]
        got = [ex.zero_bytes_per_device(p, n, stage) for stage in range(4)]
        assert got == pytest.approx(expected), (p, n, got)


class Wire:
    """The lockstep ring the student's all-reduce talks through: checks every message, counts bytes."""

    def __init__(self, world_size, numel):
        self.n, self.block, self.calls, self.sent = world_size, -(-numel // world_size), 0, 0

    def __call__(self, outgoing):
        assert len(outgoing) == self.n, f"exchange takes one message per rank, got {len(outgoing)}"
        for r, message in enumerate(outgoing):
            message = np.asarray(message)
            assert message.shape == (self.block,), (
                f"rank {r} sent {message.shape}: every message is one block of {self.block} elements "
                f"(the buffer padded to a multiple of {self.n}, cut into {self.n})")
            self.sent += message.nbytes
        self.calls += 1
        return [np.array(outgoing[(r - 1) % self.n], copy=True) for r in range(self.n)]


def check_ring_all_reduce(ex):
    for n, numel in [(1, 5), (2, 6), (3, 7), (4, 10), (5, 3), (4, 64)]:
        rng = np.random.default_rng([n, numel])
        inputs = [rng.standard_normal(numel) for _ in range(n)]
        wire = Wire(n, numel)
        results = ex.ring_all_reduce([x.copy() for x in inputs], wire)
        assert len(results) == n, f"return one result per rank, got {len(results)}"
        for r, result in enumerate(results):
            np.testing.assert_allclose(result, np.sum(inputs, axis=0), rtol=1e-12, atol=1e-12,
                                       err_msg=f"rank {r} of {n}, {numel} elements")
            assert np.array_equal(result, results[0]), f"rank {r} of {n} has other bits than rank 0"
        assert wire.calls == 2 * (n - 1), f"{n} ranks: {wire.calls} exchanges, a ring all-reduce takes 2(N-1)"
        assert wire.sent == n * 2 * (n - 1) * wire.block * 8, (n, numel, wire.sent)


def _slots(row):
    return {op: t for t, op in enumerate(row) if op is not None}


def check_gpipe_timeline(ex):
    for stages, micro in [(1, 3), (2, 4), (4, 4), (4, 8), (3, 1)]:
        timeline = [list(row) for row in ex.gpipe_timeline(stages, micro)]
        assert len(timeline) == stages, f"one row per stage, got {len(timeline)}"
        ops = [("F", m) for m in range(micro)] + [("B", m) for m in range(micro)]
        slot = []
        for s, row in enumerate(timeline):
            busy = [op for op in row if op is not None]
            assert sorted(busy) == sorted(ops) and len(busy) == len(ops), f"stage {s} runs {busy}"
            slot.append(_slots(row))
            assert max(slot[s][("F", m)] for m in range(micro)) < min(slot[s][("B", m)] for m in range(micro)), \
                f"GPipe: stage {s} runs every forward before any backward"
        for s in range(stages):
            for m in range(micro):
                if s > 0:
                    assert slot[s][("F", m)] > slot[s - 1][("F", m)], f"F{m} on stage {s} before stage {s - 1}"
                after = slot[s + 1][("B", m)] if s < stages - 1 else slot[s][("F", m)]
                assert slot[s][("B", m)] > after, f"B{m} on stage {s} runs before its gradient exists"
        span = 1 + max(t for row in slot for t in row.values())
        assert span == 2 * (micro + stages - 1), (
            f"S={stages}, M={micro}: the step ends at slot {span}; as early as the rules allow is "
            f"{2 * (micro + stages - 1)}")


def check_bubble_fraction(ex):
    for stages, micro in [(1, 4), (2, 1), (4, 4), (4, 12), (8, 1), (8, 32)]:
        busy, span = 2 * micro, 2 * (micro + stages - 1)  # per stage, in slots of the timeline
        assert ex.bubble_fraction(stages, micro) == pytest.approx(1 - busy / span), (stages, micro)


def check_one_f_one_b(ex):
    for (stage, stages, micro), expected in ONE_F_ONE_B.items():
        order = [tuple(op) for op in ex.one_f_one_b(stage, stages, micro)]
        assert order == expected, (stage, stages, micro, order)
        in_flight, peak = 0, 0
        for kind, _ in order:
            in_flight += 1 if kind == "F" else -1
            peak = max(peak, in_flight)
        assert peak == min(stages - stage, micro)


CHECKS = {"zero_bytes_per_device": check_zero_bytes_per_device, "ring_all_reduce": check_ring_all_reduce,
          "gpipe_timeline": check_gpipe_timeline, "bubble_fraction": check_bubble_fraction,
          "one_f_one_b": check_one_f_one_b}


@pytest.mark.parametrize("name", list(CHECKS))
def test_exercise(student, name):
    CHECKS[name](student)


def load_wrong(path):
    spec = importlib.util.spec_from_file_location(f"wrong_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_answer_is_rejected(library_off, path):
    module = load_wrong(path)
    assert module.TARGET in CHECKS, f"{path.name}: TARGET {module.TARGET!r} names no exercise"
    with pytest.raises(Exception):  # an AssertionError, or the wrong code crashing
        CHECKS[module.TARGET](module)


def test_every_exercise_has_wrong_answers():
    targets = {load_wrong(p).TARGET for p in WRONG}
    assert targets == set(CHECKS), f"no wrong answers for {sorted(set(CHECKS) - targets)}"


def test_the_library_is_really_off(library_off):
    """A copied library call fails, wherever the student imported it from."""
    from tinymem.distributed import bubble_fraction
    with pytest.raises(AssertionError, match="build it yourself"):
        bubble_fraction(4, 4)
    with pytest.raises(AssertionError, match="build it yourself"):
        pipeline.schedule_order("1f1b", 0, 4, 4)
