"""The ledger's pager seam: before a budget raises, pagers are asked to free device bytes."""
import gc

import numpy as np
import pytest

from tinymem import memory


class HostMover:
    """Holds one device array and moves it to the host when asked."""

    def __init__(self, nbytes):
        self.array = memory.register(np.zeros(nbytes, np.uint8), "optimizer")
        self.asked = []

    def page_out(self, nbytes):
        self.asked.append(nbytes)
        self.array = memory.register(np.array(self.array), "optimizer", "host")


def test_a_pager_frees_what_would_have_run_out_and_only_then():
    mover = HostMover(1000)
    memory.add_pager(mover)
    try:
        with memory.track(budget=memory.live_bytes() + 500, measure=False):  # the mover's 1000 B live
            fits = memory.register(np.zeros(400, np.uint8), "workspace")
            assert mover.asked == []
            spike = memory.register(np.zeros(600, np.uint8), "workspace")  # 500 B short
        assert mover.asked == [500] and memory.locate(mover.array) == ("optimizer", "host")
        del fits, spike
    finally:
        memory.remove_pager(mover)


@pytest.mark.parametrize("times", [1, 2])  # added twice: still asked once, and removed at once
def test_without_a_pager_or_with_too_little_to_move_the_budget_still_raises(times):
    mover = HostMover(100)
    for _ in range(times):
        memory.add_pager(mover)
    try:
        with pytest.raises(memory.OutOfMemoryError, match="budget"):
            with memory.track(budget=memory.live_bytes() + 500, measure=False):
                memory.register(np.zeros(1000, np.uint8), "workspace")
        assert mover.asked == [500]
    finally:
        memory.remove_pager(mover)
    assert not any(ref() is mover for ref in memory.LEDGER.pagers)


def test_a_pager_that_dies_leaves_the_ledger():
    count = len(memory.LEDGER.pagers)
    memory.add_pager(HostMover(10))
    gc.collect()
    with memory.track(budget=memory.live_bytes() + 10, measure=False):
        with pytest.raises(memory.OutOfMemoryError):
            memory.register(np.zeros(100, np.uint8), "workspace")
    assert len(memory.LEDGER.pagers) == count

