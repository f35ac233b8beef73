import math

import pytest

from tinymem import planner
from tinymem.optim.table import bytes_per_param
from tinymem.planner.probe import SIZES
from tinymem.planner.recipe import Combination
from tinymem.planner.states import model_states

pytestmark = pytest.mark.exercise_08


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("optimizer", ["SGD", "SGD momentum", "Adam"])
def test_model_state_bytes_match_the_planner(exercise, precision, optimizer):
    shapes = [(64, 128), (128,), (128, 10), (10,)]
    n = sum(math.prod(s) for s in shapes)
    per_param = bytes_per_param(optimizer, (n,))
    expected = model_states(shapes, Combination("none", precision, optimizer, "none", 1))
    assert exercise("ex08").model_state_bytes(n, precision, per_param) == expected


def test_sixteen_bytes_per_parameter_for_adam_in_both_precisions(exercise):
    fp32 = exercise("ex08").model_state_bytes(1000, "fp32", 8)
    bf16 = exercise("ex08").model_state_bytes(1000, "bf16", 8)
    assert sum(fp32.values()) == sum(bf16.values()) == 16_000


def test_extrapolate_each_event_before_taking_the_max(exercise):
    # At 2 samples the weight-sized event 0 is the peak; at 100 the batch-sized event 1 is.
    a, b = [1000, 600], [1000, 800]
    assert exercise("ex08").extrapolated_peak(a, b, 2, 3, 100) == 600 + 200 * 98


def test_extrapolated_peak_matches_the_real_step(exercise):
    work = planner.workload("mlp", "8,32,32,4")
    combo = Combination("none", "fp32", "Adam", "none", 1)
    probe = planner.run_probe(work, combo)
    m_a, m_b = SIZES
    totals = {m: [sum(row.values()) for row in probe.events[m]] for m in SIZES}
    batch = 12
    own = sum(probe.batch_bytes_per_sample.values()) * batch
    got = exercise("ex08").extrapolated_peak(totals[m_a], totals[m_b], m_a, m_b, batch) + own
    assert got == planner.measure_step(work, combo, batch)["ledger"]


def test_propose_takes_the_fastest_that_fits(exercise):
    rows = [{"bytes": 900, "seconds": 1.0}, {"bytes": 500, "seconds": 2.0},
            {"bytes": 400, "seconds": 2.0}, {"bytes": 100, "seconds": 5.0}]
    propose = exercise("ex08").propose
    assert propose(rows, 1000) is rows[0]
    assert propose(rows, 600) is rows[2]
    assert propose(rows, 50) is None


def test_micro_batches_needed(exercise):
    needed = exercise("ex08").micro_batches_needed
    assert needed(100, 10, 64, 10_000) == 1
    assert needed(100, 10, 64, 300) == 4  # 100 + 640/4 = 260
    assert needed(100, 10, 64, 120) == 32  # 100 + 20
    assert needed(100, 10, 64, 105) is None  # even 64 micro-batches of one sample: 110
    assert needed(100, 10, 12, 150) == 4  # 8 does not divide 12
