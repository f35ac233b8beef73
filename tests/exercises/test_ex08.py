"""Checks for lesson 8, held against tinymem's planner (itself held against the ledger)."""
import pytest
from conftest import subclasses

from tinymem import optim, planner
from tinymem.optim import table
from tinymem.planner import probe as probe_module
from tinymem.planner import states
from tinymem.planner.measured.probe import SIZES
from tinymem.planner.measured.recipe import Combination

pytestmark = pytest.mark.exercise_08

SHAPES = [(64, 128), (128,), (128, 10), (10,), (3, 40, 50), (4096,)]


def forbid_the_formulas(forbid):
    forbid(states.model_states, states.optimizer_state_bytes, table.bytes_per_param, table.expected_state_bytes,
           table.table, planner.predict, planner.plan)
    forbid(*[(cls, "bytes_for") for cls in subclasses(optim.Optimizer) if "bytes_for" in vars(cls)])


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
def test_model_state_bytes_match_the_planner(exercise, forbid, precision):
    cases = [(optimizer, offload, shapes) for optimizer in ("SGD", "SGD momentum", "Adam", "Adafactor", "Adam8bit")
             for offload in (("none", "optimizer") if precision == "fp32" else ("none",))
             for shapes in (SHAPES, SHAPES[1:4])]
    expected = [states.model_states(shapes, Combination("none", precision, optimizer, offload, 1))
                for optimizer, offload, shapes in cases]
    forbid_the_formulas(forbid)
    mod = exercise("ex08")
    for (optimizer, offload, shapes), want in zip(cases, expected):
        assert mod.model_state_bytes(shapes, precision, optimizer, offload) == want, (optimizer, offload, shapes)


def test_sixteen_bytes_per_parameter_for_adam_in_both_precisions(exercise):
    fp32 = exercise("ex08").model_state_bytes([(1000,)], "fp32", "Adam")
    bf16 = exercise("ex08").model_state_bytes([(1000,)], "bf16", "Adam")
    assert sum(fp32.values()) == sum(bf16.values()) == 16_000


def test_extrapolate_each_event_before_taking_the_max(exercise):
    # At 2 samples the weight-sized event 0 is the peak; at 100 the batch-sized event 1 is.
    a = [{"gradient": 1000, "activation": 0}, {"gradient": 0, "activation": 600}, {"gradient": 10, "activation": 0}]
    b = [{"gradient": 1000, "activation": 0}, {"gradient": 0, "activation": 800}, {"gradient": 10, "activation": 0}]
    phases = ["optimizer", "forward", "backward"]
    total, by_bucket, phase = exercise("ex08").extrapolated_peak(a, b, phases, 2, 3, 100)
    assert (total, by_bucket, phase) == (600 + 200 * 98, {"gradient": 0, "activation": 600 + 200 * 98}, "forward")


@pytest.mark.parametrize("name,sizes,combo", [
    ("mlp", "8,32,32,4", Combination("none", "fp32", "Adam", "none", 1)),
    ("mlp", "16,64,64,64,4", Combination("sqrt", "fp32", "SGD momentum", "none", 1))])
def test_extrapolated_peak_matches_the_planner_and_a_real_step(exercise, forbid, name, sizes, combo):
    work = planner.workload(name, sizes)
    probe = planner.run_probe(work, combo)
    assert probe.exact
    batch, (m_a, m_b) = 12, SIZES
    expected = planner.predict(probe, batch)
    own = {b: v * batch for b, v in probe.batch_bytes_per_sample.items()}
    measured = planner.measure_step(work, combo, batch)["ledger"]
    forbid(planner.predict, probe_module.predict)
    total, by_bucket, phase = exercise("ex08").extrapolated_peak(probe.events[m_a], probe.events[m_b],
                                                                 probe.phases[m_b], m_a, m_b, batch)
    assert round(total) + sum(own.values()) == measured == expected.total
    assert {b: round(v) + own[b] for b, v in by_bucket.items()} == expected.by_bucket
    assert phase == expected.phase


def test_propose_takes_the_fastest_that_fits(exercise):
    rows = [{"bytes": 900, "seconds": 1.0}, {"bytes": 500, "seconds": 2.0},
            {"bytes": 400, "seconds": 2.0}, {"bytes": 100, "seconds": 5.0}]
    propose = exercise("ex08").propose
    assert propose(rows, 1000) is rows[0]
    assert propose(rows, 900) is rows[0]  # exactly at the budget fits
    assert propose(rows, 600) is rows[2]
    assert propose(rows, 50) is None


def test_micro_batches_needed(exercise):
    needed = exercise("ex08").micro_batches_needed
    assert needed(100, 10, 64, 10_000) == 1
    assert needed(100, 10, 64, 740) == 1  # exactly at the budget fits
    assert needed(100, 10, 64, 300) == 4  # 100 + 640/4 = 260
    assert needed(100, 10, 64, 120) == 32  # 100 + 20
    assert needed(100, 10, 64, 110) == 64  # one sample per micro-batch: the last one to try
    assert needed(100, 10, 64, 105) is None  # even 64 micro-batches of one sample: 110
    assert needed(100, 10, 12, 150) == 4
    assert needed(100, 10, 12, 115) is None  # 8 would fit, but 8 does not divide 12
