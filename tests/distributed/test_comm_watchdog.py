"""A Communicator's watchdog thread ends with the Communicator: at ``close()`` (or the end of its
with-block) and when an unclosed one is garbage collected. Before, the thread slept and checked
forever, one more per Communicator made (the test-suite guard found them, test by test)."""
import gc
import threading

import pytest

from tinymem.distributed import Communicator


def _watchdogs():
    return [t for t in threading.enumerate() if t.name == "tinymem-mpi-watchdog"]


@pytest.mark.mpi
def test_closing_a_communicator_stops_its_watchdog_and_refuses_later_calls():
    before = _watchdogs()
    with Communicator(timeout=60) as comm:
        comm.barrier()  # one rank: returns at once, under the watchdog
        assert len(_watchdogs()) == len(before) + 1
    assert _watchdogs() == before
    with pytest.raises(RuntimeError, match="barrier: this Communicator is closed; make a new one"):
        comm.barrier()
    comm.close()  # twice is allowed


@pytest.mark.mpi
def test_an_unclosed_communicator_stops_its_watchdog_when_it_is_collected():
    before = _watchdogs()
    comm = Communicator(timeout=60)
    comm.barrier()
    del comm
    gc.collect()
    assert _watchdogs() == before
