"""Stacking: a model that does not fit at fp32 + Adam trains once the techniques are stacked."""
import math

import pytest

import tinymem as tm
from tinymem import memory, planner
from tinymem.planner.measured.recipe import Combination, TrainingStep
from tinymem.planner.measured.stack import stages, train_under, waterfall

SIZES = ",".join(["32"] + ["64"] * 8 + ["10"])  # 9 Linear layers, 30k parameters
BATCH, K = 1024, 16


def test_stacked_model_trains_under_a_quarter_of_its_fp32_adam_need():
    work = planner.workload("mlp", SIZES)
    plain, stacked = stages(K)[0][1], stages(K)[-1][1]
    need = planner.measure_step(work, plain, BATCH)["ledger"]
    budget = math.ceil(need / 4)
    with pytest.raises(tm.OutOfMemoryError):
        train_under(work, plain, BATCH, budget)
    losses = train_under(work, stacked, BATCH, budget, steps=4)
    assert losses[-1] < losses[0], losses
    assert planner.measure_step(work, stacked, BATCH)["ledger"] <= budget


def test_each_stage_adds_one_technique_and_the_waterfall_records_ledger_and_time():
    work = planner.workload("mlp", "16,32,32,32,4")
    records = waterfall(work, 64, micro_batches=4, repeats=1)
    combos = [Combination(**r["combo"]) for r in records]
    for before, after in zip(combos, combos[1:]):
        assert sum(a != b for a, b in zip(before, after)) == 1
    for r in records:
        assert r["ledger"] == sum(r["by_bucket"].values()) and r["seconds"] > 0 and r["measured"] > 0
    # The last two stages leave the optimizer bucket (8-bit, then on the host).
    assert records[-1]["by_bucket"]["optimizer"] == 0 < records[1]["by_bucket"]["optimizer"]
    assert records[-1]["ledger"] < records[0]["ledger"]


def test_half_blocks_recompute_inside_their_own_half_context():
    # A checkpointed block of a half model is recomputed outside the model's forward: it must
    # run as a HalfModule of its own, and every module's original forward must come back.
    work = planner.workload("mlp", "8,16,16,4")
    step = TrainingStep(work, Combination("block", "bf16", "SGD", "none", 1))
    batch = work.batch(8)
    losses = [step.step(batch) for _ in range(5)]
    assert losses[-1] < losses[0]
    assert not any("forward" in m.__dict__ for m in step.root.modules())
    with memory.track(measure=False) as t:
        step.step(batch)
    assert t.max_by_bucket()["parameter"] == sum(p.nbytes for p in step.root.parameters())
