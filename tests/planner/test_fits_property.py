"""Property: on random small shapes, memories and GPU counts, each row of
:func:`tinymem.planner.fits.plan_arch` that fits on N GPUs has its fewest GPUs <= N, and its fewest
GPUs is the true least count, found by trying every count (data-parallel copies or pipeline
stages) with :func:`tinymem.planner.fits.grow`, the rule the row itself follows."""
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

from tinymem.planner import architectures, fits  # noqa: E402
from tinymem.planner.search.fits import PIPELINES  # noqa: E402

SEARCH = 48  # data-parallel copies tried one by one


@st.composite
def machines(draw):
    heads = draw(st.sampled_from([1, 2, 4, 8]))
    arch = architectures.custom(draw(st.integers(1, 6)), heads * draw(st.integers(2, 8)) * 2, heads,
                                draw(st.integers(2, 24)), draw(st.integers(5, 300)))
    gpus = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16]))
    batch = draw(st.integers(1, 3))
    micro_batches = draw(st.sampled_from([None, 1, 2, 5]))
    # a memory between the smallest and the largest peak, so that some rows fit and some do not
    rows, _ = fits.plan_arch(arch, gpus, 1e30, batch, micro_batches=micro_batches)
    peaks = sorted(r.breakdown.peak for r in rows)
    memory = draw(st.floats(0.5 * peaks[0], 1.2 * peaks[-1]))
    return arch, gpus, batch, micro_batches, memory


def least(arch, batch, row, memory, micro_batches):
    """The least count that fits, by trying every one (None: none up to the search's end)."""
    stages = row.name in PIPELINES
    top = arch.layers if stages else SEARCH
    for count in range(1, top + 1):
        stack = fits.grow(row.stack, count, stages, micro_batches)
        if fits.run(arch, batch, stack).peak <= memory:
            return count if stages else count * row.stack.tensor * row.stack.pipeline
    return None


@settings(max_examples=10, deadline=None)
@given(machines())
def test_fits_on_n_gpus_means_fewest_at_most_n_and_fewest_is_the_true_least(machine):
    arch, gpus, batch, micro_batches, memory = machine
    rows, proposal = fits.plan_arch(arch, gpus, memory, batch, micro_batches=micro_batches)
    for row in rows:
        if row.fits:
            assert row.fewest_gpus is not None and row.fewest_gpus <= gpus, row.name
        truth = least(arch, batch, row, memory, micro_batches)
        if truth is not None:
            assert row.fewest_gpus == truth, (row.name, row.fewest_gpus, truth)
        elif row.fewest_gpus is not None:
            assert row.fewest_gpus > SEARCH * row.stack.tensor * row.stack.pipeline, row.name
    if proposal is not None:
        assert proposal.breakdown.peak <= memory and not fits.refusal(proposal.stack)
