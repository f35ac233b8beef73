"""A Communicator's watchdog thread ends with the Communicator: at ``close()`` (or the end of its
with-block) and when an unclosed one is garbage collected. Before, the thread slept and checked
forever, one more per Communicator made (the test-suite guard found them, test by test)."""
import gc
import threading

import numpy as np
import pytest

from tinymem.distributed import Communicator, launch


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


_CLOSED_DURING_A_CALL = """
import threading, time
from tinymem.distributed import Communicator, launch
comm = Communicator(timeout=2)
if comm.rank == 0:
    threading.Timer(0.5, comm.close).start()  # closed while the barrier below waits
    comm.barrier()  # rank 1 never comes
    print("the barrier returned", flush=True)
else:
    time.sleep(60)
"""


@pytest.mark.mpi
def test_a_communicator_closed_during_a_blocking_call_still_aborts_it_at_its_deadline(tmp_path):
    # Before, close() from another thread stopped the watchdog under the call: with a rank that
    # never came, the barrier waited forever (the launch's timeout killed it).
    script = tmp_path / "closed_during_a_call.py"
    script.write_text(_CLOSED_DURING_A_CALL)
    result = launch.run([str(script)], 2, timeout=45, check=False)
    assert result.returncode != 0
    assert "waited more than 2 s in barrier (rank 0 of 2)" in result.stderr
    assert "the barrier returned" not in result.stdout


@pytest.mark.mpi
def test_a_send_on_a_closed_communicator_is_refused_like_its_wait():
    # Before, the send was posted (and counted in traffic) though wait() on it refuses, so its
    # request could never complete (MPICH: "pending references" at exit).
    comm = Communicator(timeout=60)
    comm.close()
    with pytest.raises(RuntimeError, match="send: this Communicator is closed; make a new one"):
        comm.send(np.ones(4), 0)
    assert comm.traffic.total() == 0
