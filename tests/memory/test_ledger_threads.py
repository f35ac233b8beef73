"""The ledger under several threads: registering, holding and freeing at once from four threads
leaves its counts where they started and a timeline that adds up, event by event.

The threads switch every microsecond (``sys.setswitchinterval``), so that a thread is often
interrupted inside a change of the ledger. Without the ledger's lock, an array that four
threads registered at once was counted up to four times (and its bytes never left the counts),
and an event's totals counted another thread's array before that array's own event was in the
log, so that the timeline's running sums and its totals disagreed within the first few events.
"""
import sys
import threading
import time

import numpy as np
import pytest

from tinymem import memory
from tinymem.memory.ledger import BUCKETS, LEDGER

THREADS, ROUNDS = 4, 400
SIZES = (8, 24, 40, 136)  # float64 elements: 64 B to 1088 B, so a lost update shows as its size


@pytest.fixture
def fast_switching():
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def _racer(barrier, errors):
    try:
        barrier.wait(timeout=30)
        for i in range(ROUNDS):
            size = SIZES[i % len(SIZES)]
            kept = [memory.register(np.empty(size), "workspace", "device", label="racer") for _ in range(3)]
            memory.hold(kept[0])  # saved for backward: a free and an alloc as it changes bucket
            memory.register(kept[1], "gradient", label="racer")  # a higher owner: a move too
            memory.unhold(kept[0])
            del kept  # three frees, from this thread's weakref callbacks
    except BaseException as exc:  # shown by the main thread's assertion
        errors.append(exc)


class _Yielding(np.ndarray):
    """An array that lets other threads run while the ledger reads its size: the ledger's
    lookup of an array and its recording of it are then surely interleaved with another
    thread's, where plain arrays only sometimes are (the race is the same)."""

    @property
    def nbytes(self):
        time.sleep(0)  # releases the GIL: a waiting thread runs now
        return self.size * self.itemsize


def _shared_racer(barrier, errors, shared):
    """Register arrays that every thread registers too (an array handed to several workers),
    all threads the same array at the same time (they meet at the barrier before each)."""
    try:
        for array in shared:
            barrier.wait(timeout=30)
            memory.register(array, "workspace", "device", label="racer")
    except BaseException as exc:
        errors.append(exc)


def _race(target=_racer, *args):
    barrier, errors = threading.Barrier(THREADS), []
    threads = [threading.Thread(target=target, args=(barrier, errors) + args, name=f"racer-{n}")
               for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads), "a racing thread did not finish in 120 s"


def test_threads_registering_and_freeing_at_once_leave_the_counts_where_they_started(fast_switching):
    before = {(p, b): LEDGER.live[p][b] for p in LEDGER.live for b in BUCKETS}
    entries = len(LEDGER.entries)
    _race()
    shared = [np.empty(SIZES[i % len(SIZES)]).view(_Yielding).copy() for i in range(ROUNDS)]
    _race(_shared_racer, shared)
    assert LEDGER.bytes("workspace") - before["device", "workspace"] == sum(a.nbytes for a in shared), \
        "an array that several threads registered at once was counted more than once"
    del shared
    after = {(p, b): LEDGER.live[p][b] for p in LEDGER.live for b in BUCKETS}
    changed = {k: (before[k], after[k]) for k in before if before[k] != after[k]}
    assert not changed, f"counts that did not return to their start (before, after): {changed}"
    assert len(LEDGER.entries) == entries


def test_a_timeline_written_by_several_threads_adds_up_event_by_event(fast_switching):
    running = LEDGER.by_bucket()  # no other thread runs yet: the window opens on these
    with memory.track(measure=False) as t:
        _race()
    events = [e for e in t.events if e[1] != "mark"]
    assert len(events) == THREADS * ROUNDS * 12  # per round: 3 allocs, 3 frees, 3 moves of 2 events
    state, peak, bucket_max = {}, t.start, dict(running)
    for n, (_, kind, bucket, nbytes, _, totals, entry) in enumerate(events):
        was = state.get(entry)
        if kind == "alloc":
            assert was is None, f"event {n}: an alloc of an array already counted (in {was})"
            state[entry] = bucket
            running[bucket] += nbytes
        else:
            assert was == bucket, f"event {n}: a free in {bucket} of an array counted in {was} (free before alloc?)"
            del state[entry]
            running[bucket] -= nbytes
        live = dict(zip(BUCKETS, totals))
        assert live == running, f"event {n} ({kind} {nbytes} B {bucket}): its totals {live} are not " \
                                f"the log's running totals {running}"
        peak = max(peak, sum(running.values()))
        bucket_max = {b: max(bucket_max[b], running[b]) for b in BUCKETS}
    assert not state, f"{len(state)} arrays allocated in the window were never freed in its log"
    assert t.peak() >= peak and t.peak() == peak, (t.peak(), peak)
    assert all(t.max_by_bucket()[b] >= bucket_max[b] for b in BUCKETS), (t.max_by_bucket(), bucket_max)


def _churn(stop, size, errors):
    try:
        while not stop.is_set():
            kept = [memory.register(np.empty(size), "workspace", "device") for _ in range(5)]
            del kept
    except BaseException as exc:
        errors.append(exc)


def test_the_peak_entries_read_while_threads_allocate_sum_to_the_peak(fast_switching):
    # Before, top()/by_module() copied the window's live set and then walked its log without the
    # lock, so a change by another thread between the two was half seen: the rows summed to more
    # or less than the peak read just before and after (most reads, at a 1 us switch interval).
    stop, errors, wrong, compared = threading.Event(), [], [], 0
    # Many arrays live: the window folds its log only after twice as many events, so that the
    # reads below walk the log for a while.
    live = [memory.register(np.empty(1), "workspace", "device") for _ in range(20_000)]
    with memory.track(timeline=False) as t:
        threads = [threading.Thread(target=_churn, args=(stop, size, errors)) for size in SIZES[:3]]
        for thread in threads:
            thread.start()
        try:
            for _ in range(300):
                before = t.peak()
                entries = t.peak_entries()
                if t._peak_state is not None:
                    break  # folded: the reads from here copy one dict
                if t.peak() == before:  # no new peak meanwhile: the entries are those of `before`
                    compared += 1
                    total = sum(entry.nbytes for entry in entries)
                    if total != before:
                        wrong.append((total, before))
        finally:
            stop.set()
            for thread in threads:
                thread.join()
    del live
    assert not errors and compared >= 20
    assert wrong == [], f"{len(wrong)} of {compared} reads did not sum to the peak, e.g. {wrong[:3]}"


def test_a_budget_opened_in_one_thread_refuses_the_allocation_of_another_and_counts_nothing():
    # The window is the process's (one device for all threads): the thread that allocates past
    # it gets the error, and the refused array leaves no bytes behind.
    opened, result = threading.Event(), {}
    before = LEDGER.bytes()

    def other():
        opened.wait(timeout=30)
        try:
            memory.register(np.empty(10_000), "workspace", "device")
            result["other"] = "allocated"
        except memory.OutOfMemoryError:
            result["other"] = "refused"

    thread = threading.Thread(target=other)
    thread.start()
    with memory.track(budget=before + 40_000, measure=False) as t:
        opened.set()
        thread.join(timeout=30)
        kept = memory.register(np.empty(1_000), "workspace", "device")  # a good one after
        assert t.peak() == before + 8_000
    del kept
    assert result == {"other": "refused"} and LEDGER.bytes() == before
