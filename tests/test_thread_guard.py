"""The suite's guard against threads a test leaves running (conftest.threads_left_running, run
after every test by an autouse fixture). It found the Communicator watchdogs that
tests/distributed/test_batch_device.py and test_batch_lists.py left, one per test."""
import contextlib
import threading
import time

from conftest import threads_left_running


@contextlib.contextmanager
def _waiting_thread(name):
    """A thread named ``name`` that waits until the block ends."""
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name=name, daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        release.set()
        thread.join()


def test_a_thread_left_waiting_is_named_and_one_that_ends_is_not():
    before = set(threading.enumerate())
    with _waiting_thread("left-behind") as thread:
        assert threads_left_running(before, grace=0.1) == [thread]
    assert threads_left_running(before, grace=0.1) == []


def test_a_thread_that_is_finishing_gets_its_grace():
    before = set(threading.enumerate())
    thread = threading.Thread(target=time.sleep, args=(0.2,))
    thread.start()
    assert threads_left_running(before, grace=5) == []
    assert not thread.is_alive()


def test_a_library_thread_kept_for_the_whole_process_is_not_a_leak():
    before = set(threading.enumerate())
    with _waiting_thread("tqdm_monitor"):
        assert threads_left_running(before, grace=0.1) == []
