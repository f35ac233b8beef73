""""fits" and "fewest GPUs" of :func:`tinymem.planner.fits.plan_arch` come from one search.

A pipeline's peak is not monotone in its stages (a stage holds ceil(L/p) layers: LLaMA-3 8B's
1F1B peak is 35.27 GB on 11 stages, 36.10 GB on 15 and 31.75 GB on 16), so a bisection over
stages found 16 where 11 fit. And ``--micro-batches 1`` fed one micro-batch to the row's own
count but one per stage to the search for the fewest."""
import pytest

from tinymem.planner import fits
from tinymem.planner.model.architectures import get_arch
from tinymem.planner.inputs import Stack
from tinymem.planner.search.fits import PIPELINES


def _rows(arch, gpus, memory, micro_batches=None):
    rows, _ = fits.plan_arch(arch, gpus, memory, micro_batches=micro_batches)
    return {r.name: r for r in rows}


def _fits_on(arch, row, count, memory, micro_batches=None):
    stack = fits.grow(row.stack, count, row.name in PIPELINES, micro_batches)
    return fits.run(arch, 1, stack).peak <= memory


@pytest.mark.parametrize("gpus", [8, 11])
def test_the_fewest_pipeline_stages_are_the_least_that_fit_not_a_bisection(gpus):
    row = _rows("llama3-8b", gpus, 35.3e9)[PIPELINES[0]]
    assert row.fewest_gpus == 11  # the bisection said 16
    assert row.fits == (gpus >= 11)


def test_one_micro_batch_is_one_micro_batch_in_the_search_for_the_fewest_too():
    row = _rows("llama3-8b", 8, 37e9, micro_batches=1)[PIPELINES[0]]
    assert row.stack.micro_batches == 1
    assert row.fits and row.fewest_gpus <= 8  # the search fed 11 stages 11 micro-batches: "fewest 11"
    assert all(_fits_on("llama3-8b", row, c, 37e9, 1) == (c == row.fewest_gpus)
               for c in range(1, row.fewest_gpus + 1))


@pytest.mark.parametrize("arch,gpus,memory,micro_batches", [
    ("llama3-8b", 8, 35.3e9, None), ("llama3-8b", 11, 33e9, 1), ("llama2-7b", 4, 40e9, 2),
    ("gpt3-1.3b", 2, 12e9, None), ("llama2-70b", 16, 60e9, None), ("llama2-70b", 64, 30e9, 8)])
def test_a_row_fits_exactly_when_its_fewest_gpus_are_at_most_the_gpus_given(arch, gpus, memory, micro_batches):
    for name, row in _rows(arch, gpus, memory, micro_batches).items():
        if row.fits:
            assert row.fewest_gpus is not None and row.fewest_gpus <= gpus, name
        if name in PIPELINES:  # exhaustive: the least stage count that fits, or None
            counts = [c for c in range(1, min(2 * gpus, get_arch(arch).layers) + 1) if _fits_on(arch, row, c, memory, micro_batches)]
            if counts and counts[0] <= gpus:
                assert row.fewest_gpus == counts[0], name
        elif row.fewest_gpus is not None:  # monotone in the ranks: one fewer copy does not fit
            scale = row.stack.tensor * row.stack.pipeline
            assert row.fits == (row.fewest_gpus <= gpus), name
            assert _fits_on(arch, row, row.fewest_gpus // scale, memory)
            if row.fewest_gpus > scale:
                assert not _fits_on(arch, row, row.fewest_gpus // scale - 1, memory), name


def test_a_row_that_fits_on_more_gpus_than_the_search_limit_still_has_its_fewest():
    # ZeRO-3 of GPT-2 on 2**21 GPUs, memory between its peaks at 2**20 and 2**21 ranks: the
    # search stopped at 2**20 and the row said "fits yes, fewest GPUs -"
    arch, gpus = get_arch("gpt2"), 2 ** 21
    stack = _rows(arch, gpus, 1e30)["+ ZeRO-3"].stack
    memory = (fits.run(arch, 1, stack._replace(ranks=2 ** 20)).peak + fits.run(arch, 1, stack).peak) / 2
    row = _rows(arch, gpus, memory)["+ ZeRO-3"]
    assert row.fits and row.fewest_gpus is not None and 2 ** 20 < row.fewest_gpus <= gpus
    assert _fits_on(arch, row, row.fewest_gpus, memory) and not _fits_on(arch, row, row.fewest_gpus - 1, memory)


@pytest.mark.parametrize("tensor,ranks", [(8, 1), (1, 4), (8, 4)])
def test_the_fewest_gpus_of_a_pipeline_count_every_gpu_of_its_layout_not_its_stages(tensor, ranks):
    # fewest_gpus returned the stage count: 5 for t=8 (a layout of 40 GPUs), 20 for d=4 (80 GPUs)
    arch = get_arch("llama2-70b")
    stack = Stack("bf16", "Adam", "full", zero=1, ranks=ranks, pipeline=2, tensor=tensor, micro_batches=8)
    gpus = fits.fewest_gpus(arch, 1, stack, 40e9)
    assert fits.gpus_per_count(stack, True) == tensor * ranks and gpus % (tensor * ranks) == 0
    stages = gpus // (tensor * ranks)
    peaks = [fits.run(arch, 1, fits.grow(stack, p, True)).peak for p in range(1, stages + 1)]
    assert peaks[-1] <= 40e9 < min(peaks[:-1]), peaks
    layout = fits.grow(stack, stages, True)
    assert layout.tensor * layout.pipeline * layout.ranks == gpus
