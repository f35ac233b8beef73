"""The offload worker's thread ends with its owner: at ``shutdown()``/``close()``, and when a
worker or a prefetcher is dropped without them. Before, the thread held its worker (its target
was a bound method), so an unclosed one never died and its thread waited for jobs forever."""
import gc
import os
import threading

import numpy as np
import pytest

from tinymem.techniques.offload.prefetch import Prefetcher, Worker
from tinymem.techniques.offload.store import HostStore


def _ended(thread):
    thread.join(timeout=5)
    return not thread.is_alive()


def test_a_worker_runs_its_jobs_and_shutdown_stops_its_thread():
    worker = Worker()
    out = np.zeros(3)
    worker.submit(np.copyto, out, np.arange(3.0)).wait()
    assert out.tolist() == [0.0, 1.0, 2.0]
    thread = worker._thread
    worker.shutdown()
    assert not thread.is_alive()


def test_a_worker_dropped_without_shutdown_stops_its_thread():
    worker = Worker()
    worker.submit(np.copyto, np.zeros(2), np.ones(2)).wait()
    thread = worker._thread
    del worker
    gc.collect()
    assert _ended(thread), "the thread of a dropped Worker still waits for jobs"


def test_a_prefetcher_dropped_without_close_stops_its_worker_thread():
    prefetcher = Prefetcher(HostStore(), depth=2)
    thread = prefetcher.worker._thread
    del prefetcher
    gc.collect()
    assert _ended(thread), "the thread of a dropped Prefetcher still waits for jobs"


def test_a_job_submitted_after_shutdown_is_refused_instead_of_never_running():
    # Before, submit queued it behind the stop: its thread was gone and job.wait() hung forever.
    worker = Worker()
    worker.shutdown()
    with pytest.raises(RuntimeError, match="this worker is shut down; make a new one"):
        worker.submit(np.copyto, np.zeros(2), np.ones(2))


def test_an_error_in_a_job_reaches_the_caller_and_the_thread_runs_the_next_job():
    worker = Worker()
    with pytest.raises(ZeroDivisionError):
        worker.submit(lambda: 1 / 0).wait()
    out = np.zeros(2)
    worker.submit(np.copyto, out, np.ones(2)).wait()
    assert out.tolist() == [1.0, 1.0]
    worker.shutdown()
    worker.shutdown()  # twice is allowed
    assert not worker._thread.is_alive()


def test_waiting_for_a_job_skipped_by_shutdown_raises_instead_of_returning_as_if_it_ran():
    # Before, a job queued behind a running one and skipped by shutdown() was marked done with
    # no error: wait() returned, and its caller took a copy that never ran for one that did.
    worker = Worker()
    started, release = threading.Event(), threading.Event()
    worker.submit(lambda: (started.set(), release.wait(5)))
    out = np.zeros(2)
    skipped = worker.submit(np.copyto, out, np.ones(2))
    started.wait(5)
    stopper = threading.Thread(target=worker.shutdown)
    stopper.start()
    while not worker._closing.is_set():
        stopper.join(timeout=0.001)
    release.set()
    stopper.join(timeout=5)
    with pytest.raises(RuntimeError, match="skipped: its Worker was shut down before it started"):
        skipped.wait()
    assert out.tolist() == [0.0, 0.0]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_is_refused_its_parents_worker_instead_of_waiting_forever():
    # Before, the child queued the job for a thread that a fork does not copy: wait() hung.
    worker = Worker()
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only when the submit is refused with the message
        try:
            worker.submit(np.copyto, np.zeros(2), np.ones(2))
            code = 1
        except RuntimeError as exc:
            code = 0 if "made in the parent process before a fork" in str(exc) else 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    worker.shutdown()
    assert os.waitstatus_to_exitcode(status) == 0
