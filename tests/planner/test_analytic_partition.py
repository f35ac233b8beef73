"""The partitioning terms of the closed form against real MPI runs at 2 and 4 ranks.

One ``tinymem.distributed.worker measure`` per world size (two mpiexec launches in all) trains
an MLP whose layers do not split evenly (15-33-33-33-7: most flat units are padded) with data
parallel, ZeRO-1/2/3, GPipe and 1F1B, and reports each rank's ledger. The closed form must give
each rank's parameter, gradient and optimizer bytes at the end of backward exactly
(``analytic.model_states`` with the units' sizes, which ZeRO pads to a multiple of N), and the
pipeline stages' activation peaks as the micro-batches in flight times one micro-batch's
saved tensors (``analytic.pipeline_in_flight``).
"""
import math
import os
import pathlib

import pytest
from conftest import missing_reference

from tinymem import memory
from tinymem.distributed import launch
from tinymem.distributed.pipeline import partition
from tinymem.distributed.worker import parse_result
from tinymem.planner import analytic

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIZES, BATCH, MICRO = (15, 33, 33, 33, 7), 32, 4
LINEARS = list(zip(SIZES[:-1], SIZES[1:]))
UNITS = [n for i, o in LINEARS for n in (i * o + o, 0)][:-1]  # Linear, ReLU, ..., Linear
SHAPES = [s for i, o in LINEARS for s in ((o, i), (o,))]
STAGE = {"dp": 0, "zero1": 1, "zero2": 2, "zero3": 3}


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def run(request):
    if not launch.mpi_available():
        missing_reference("mpi4py or mpiexec", "pip install .[dist]")  # fails under CI=true
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = launch.run(["-m", "tinymem.distributed.worker", "measure", "--sizes", ",".join(map(str, SIZES)),
                      "--batch", str(BATCH), "--micro-batches", str(MICRO)], request.param, timeout=180,
                     env=env, cwd=str(ROOT)).stdout
    return parse_result(out)


@pytest.mark.mpi
@pytest.mark.parametrize("strategy", list(STAGE))
def test_model_states_per_rank_equal_the_ledger(run, strategy):
    ranks = run["world_size"]
    expected = analytic.model_states(SHAPES, STAGE[strategy], ranks, "Adam", "fp32",
                                     units=[u for u in UNITS if u])
    for record in run["records"]:
        if record["strategy"] != strategy:
            continue
        got = {b: record["at_backward_end"][b] for b in expected}
        assert got == expected, (f"{strategy} rank {record['rank']} of {ranks}\n"
                                 + memory.format_table(record["at_backward_end"], "ledger at the end of backward")
                                 + f"\nclosed form {expected}")
        assert record["optimizer_state_bytes"] == expected["optimizer"]


def saved_per_micro_batch(first, last, stages, stage, micro):
    """Bytes one micro-batch of ``micro`` samples leaves saved on a pipeline stage running units
    [first, last) of the MLP, and bytes saved once per step (views of the whole batch)."""
    per, once = 0, 0
    for j in range(first, last):
        width = SIZES[j // 2] if j % 2 == 0 else SIZES[j // 2 + 1]
        if j % 2 == 0:  # Linear: saves its input, unless the ReLU before it already saved it
            if j == first:
                if stage == 0:
                    once += 4 * BATCH * width  # a view of the whole batch's input
                else:
                    per += 4 * micro * width  # the buffer received from the previous stage
        else:  # ReLU: saves its output (the next Linear's input)
            per += 4 * micro * width
    if stage == stages - 1:  # cross-entropy: probabilities, and the targets (a view of the batch's)
        per += 4 * micro * SIZES[-1]
        once += 8 * BATCH
    return per, once


@pytest.mark.mpi
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_stages_hold_the_micro_batches_in_flight(run, schedule):
    ranks = run["world_size"]
    starts = partition(UNITS, ranks) + [len(UNITS)]
    micro = BATCH // MICRO
    for record in run["records"]:
        if record["strategy"] != schedule:
            continue
        stage = record["rank"]
        per, once = saved_per_micro_batch(starts[stage], starts[stage + 1], ranks, stage, micro)
        in_flight = analytic.pipeline_in_flight(stage, ranks, MICRO, schedule)
        assert record["max_by_bucket"]["activation"] == in_flight * per + once, \
            (schedule, stage, in_flight, per, once, record["max_by_bucket"])
    # 1F1B's first stage holds min(p, m) micro-batches, GPipe's all m.
    assert analytic.pipeline_in_flight(0, ranks, MICRO, "1f1b") == min(ranks, MICRO)
    assert analytic.pipeline_in_flight(0, ranks, MICRO, "gpipe") == MICRO


def test_units_are_padded_so_the_check_sees_padding():
    assert any(u % 4 for u in UNITS if u) and math.prod(SIZES) > 0
