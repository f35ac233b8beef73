"""Checks for lesson 7, held against tinymem.distributed's own code (calculator, comm, flat, pipeline)."""
import pytest

import tinymem as tm
from tinymem.distributed import calculator
from tinymem.distributed.comm import ring_bytes
from tinymem.distributed.flat import FlatUnit
from tinymem.distributed.pipeline import schedule_order

pytestmark = pytest.mark.exercise_07


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
@pytest.mark.parametrize("world_size", [1, 4, 64])
def test_zero_bytes_per_device(exercise, stage, world_size):
    expected = calculator.model_state_bytes(7.5e9, world_size, calculator.STRATEGIES[stage])["total"]
    assert exercise("ex07").zero_bytes_per_device(7.5e9, world_size, stage) == pytest.approx(expected)


def test_paper_numbers(exercise):
    gb = [exercise("ex07").zero_bytes_per_device(7.5e9, 64, s) / 1e9 for s in range(4)]
    assert [round(g, 1) for g in gb] == [120.0, 31.4, 16.6, 1.9]


@pytest.mark.parametrize("world_size", [1, 2, 3, 8])
def test_ring_all_reduce_bytes(exercise, world_size):
    assert exercise("ex07").ring_all_reduce_bytes(4096, world_size) == pytest.approx(
        ring_bytes("all_reduce", 4096, world_size))


@pytest.mark.parametrize("sizes,world_size", [([5, 3], 4), ([8, 8], 2), ([7, 1], 3)])
def test_shard_range_matches_flat_unit(exercise, sizes, world_size):
    layer = tm.nn.Linear(*sizes)
    for rank in range(world_size):
        flat = FlatUnit(layer, world_size, rank)
        assert exercise("ex07").shard_range(flat.numel, world_size, rank) == (flat.lo, flat.hi, flat.padded)


@pytest.mark.parametrize("stages,micro", [(1, 4), (4, 4), (4, 12), (8, 1)])
def test_bubble_fraction(exercise, stages, micro):
    idle_slots, total_slots = stages - 1, micro + stages - 1
    assert exercise("ex07").bubble_fraction(stages, micro) == pytest.approx(idle_slots / total_slots)


@pytest.mark.parametrize("stages,micro", [(2, 4), (4, 4), (4, 6), (4, 2)])
def test_one_f_one_b(exercise, stages, micro):
    for stage in range(stages):
        order = exercise("ex07").one_f_one_b(stage, stages, micro)
        assert order == schedule_order("1f1b", stage, stages, micro)
        in_flight, peak = 0, 0
        for kind, _ in order:
            in_flight += 1 if kind == "F" else -1
            peak = max(peak, in_flight)
        assert peak == min(stages - stage, micro)
