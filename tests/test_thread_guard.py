"""The suite's guard against threads a test leaves running (conftest.threads_left_running, run
after every test by an autouse fixture). It found the Communicator watchdogs that
tests/distributed/test_batch_device.py and test_batch_lists.py left, one per test."""
import threading
import time

from conftest import threads_left_running


def test_a_thread_left_waiting_is_named_and_one_that_ends_is_not():
    before = set(threading.enumerate())
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="left-behind", daemon=True)
    thread.start()
    try:
        assert threads_left_running(before, grace=0.1) == [thread]
    finally:
        release.set()
        thread.join()
    assert threads_left_running(before, grace=0.1) == []


def test_a_thread_that_is_finishing_gets_its_grace():
    before = set(threading.enumerate())
    thread = threading.Thread(target=time.sleep, args=(0.2,))
    thread.start()
    assert threads_left_running(before, grace=5) == []
    assert not thread.is_alive()


def test_a_library_thread_kept_for_the_whole_process_is_not_a_leak():
    before = set(threading.enumerate())
    release = threading.Event()
    thread = threading.Thread(target=release.wait, name="tqdm_monitor", daemon=True)
    thread.start()
    try:
        assert threads_left_running(before, grace=0.1) == []
    finally:
        release.set()
        thread.join()
