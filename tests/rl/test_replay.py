"""The replay buffer: four storage schemes, one index, bit-identical batches, bytes by formula."""
import os

import numpy as np
import pytest

from tinymem import memory
from tinymem.rl import BatchPrefetcher, ReplayBuffer, bytes_per_slot, stack_slots

SCHEMES = ["float32", "uint8", "dedup", "disk"]


def episodes(seed=0, n_steps=300, frame=(6, 5), max_len=23):
    """A stream of (kind, payload) events: reset frames and steps, random lengths and endings."""
    rng = np.random.default_rng(seed)
    events, t = [], 0
    while t < n_steps:
        events.append(("reset", rng.integers(0, 256, frame, dtype=np.uint8)))
        length = int(rng.integers(1, max_len))
        for i in range(length):
            last = i == length - 1
            terminated = bool(last and rng.random() < 0.5)
            events.append(("step", (int(rng.integers(3)), float(rng.standard_normal()),
                                    rng.integers(0, 256, frame, dtype=np.uint8), terminated)))
            t += 1
    return events


def fill(buffer, events):
    for kind, payload in events:
        if kind == "reset":
            buffer.start_episode(payload)
        else:
            buffer.add(*payload)
    return buffer


@pytest.mark.parametrize("capacity", [50, 1000])  # 50 wraps the ring many times
@pytest.mark.parametrize("frame_stack", [1, 4])
def test_every_scheme_returns_bit_identical_batches(capacity, frame_stack, tmp_path):
    events = episodes()
    batches = {}
    for scheme in SCHEMES:
        with fill(ReplayBuffer(capacity, (6, 5), frame_stack, scheme, directory=tmp_path), events) as buf:
            rng = np.random.default_rng(7)
            batches[scheme] = [buf.sample(16, rng) for _ in range(5)]
    for scheme in SCHEMES[1:]:
        for got, ref in zip(batches[scheme], batches["float32"]):
            for name, a, b in zip(ref._fields, got, ref):
                assert a.dtype == b.dtype and a.shape == b.shape, f"{scheme}.{name}"
                assert np.array_equal(a, b), f"{scheme} differs from float32 in {name}"


def test_stacks_are_the_ones_the_agent_saw_and_never_cross_episodes():
    """Reference: the stacks the agent saw, built independently while the events streamed."""
    events = episodes(seed=3, n_steps=200)
    k = 4
    buf = fill(ReplayBuffer(1000, (6, 5), k, "dedup"), events)
    expected = []  # (obs stack, next stack, action, reward, done) per step, in order
    for kind, payload in events:
        if kind == "reset":
            seen = [payload] * k
        else:
            action, reward, frame, terminated = payload
            nxt = seen[1:] + [frame]
            expected.append((np.stack(seen), np.stack(nxt), action, reward, terminated))
            seen = nxt
    numbers = np.flatnonzero(buf.sampleable(np.arange(buf.written)))
    assert len(numbers) == len(expected) == len(buf)
    batch = buf.gather(numbers)
    for i, (obs, nxt, action, reward, terminated) in enumerate(expected):
        assert np.array_equal(batch.obs[i], obs) and np.array_equal(batch.next_obs[i], nxt)
        assert batch.action[i] == action and batch.reward[i] == np.float32(reward)
        assert batch.done[i] == float(terminated)


def test_stack_slots_repeat_the_reset_frame():
    # slot 10 is the 2nd step of an episode (step 2): its stack is 8, 8, 9, 10 (reset frame 8).
    assert stack_slots(np.array([10]), np.array([2]), 4).tolist() == [[8, 8, 9, 10]]
    assert stack_slots(np.array([10]), np.array([7]), 4).tolist() == [[7, 8, 9, 10]]


def test_after_wrapping_only_transitions_with_all_frames_are_sampled():
    k, cap = 4, 10
    buf = ReplayBuffer(cap, (2,), k, "dedup")
    buf.start_episode(np.zeros(2, np.uint8))
    for i in range(1, 30):  # one long episode: frame i holds the value i
        buf.add(0, 0.0, np.full(2, i, np.uint8))
    numbers = buf.sample_numbers(500, np.random.default_rng(0))
    # Oldest slot 20: a transition ending at n needs frames n-4 .. n, so n >= 24.
    assert numbers.min() == 24 and numbers.max() == 29
    batch = buf.gather(numbers)
    assert np.array_equal(batch.next_obs[:, -1, 0], numbers) and np.array_equal(batch.obs[:, 0, 0], numbers - 4)


def test_ledger_counts_the_formula_bytes_in_host_or_disk(tmp_path):
    for scheme in SCHEMES:
        host0, disk0 = memory.live_bytes(place="host"), memory.live_bytes(place="disk")
        buf = ReplayBuffer(300, (84, 84), 4, scheme, directory=tmp_path)
        host, disk = memory.live_bytes(place="host") - host0, memory.live_bytes(place="disk") - disk0
        formula = 300 * bytes_per_slot(scheme, (84, 84), 4)
        assert host + disk == formula == buf.nbytes["host"] + buf.nbytes["disk"], scheme
        assert (disk > 0) == (scheme == "disk") and host == buf.nbytes["host"]
        buf.close()
        del buf
        assert memory.live_bytes(place="disk") == disk0
    ratio = bytes_per_slot("float32", (84, 84), 4) / bytes_per_slot("dedup", (84, 84), 4)
    assert ratio > 31  # 2·k·4 = 32x, less the 13 bytes of index per slot


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files through /proc (Linux)")
def test_disk_file_is_unnamed_and_closed_always(tmp_path):
    fds = len(os.listdir("/proc/self/fd"))
    with ReplayBuffer(100, (8, 8), 2, "disk", directory=tmp_path) as buf:
        fill(buf, episodes(frame=(8, 8)))
        assert os.listdir(tmp_path) == []  # no directory entry to leave behind
    assert len(os.listdir("/proc/self/fd")) == fds
    with pytest.raises(ZeroDivisionError):
        with ReplayBuffer(100, (8, 8), 2, "disk", directory=tmp_path):
            1 / 0
    assert len(os.listdir("/proc/self/fd")) == fds
    buf = ReplayBuffer(100, (8, 8), 2, "disk", directory=tmp_path)
    del buf  # dropped without close(): the finalizer closes it
    assert len(os.listdir("/proc/self/fd")) == fds


def test_prefetched_batches_are_the_same_for_every_scheme_and_survive_overwrites(tmp_path):
    events = episodes(seed=1)
    runs = {}
    for scheme in SCHEMES:
        buf = fill(ReplayBuffer(60, (6, 5), 4, scheme, directory=tmp_path), events[:200])
        with BatchPrefetcher(buf, 16, np.random.default_rng(5)) as pre:
            out = []
            for kind, payload in events[200:260]:  # keep adding while batches are in flight
                out.append(pre.next())
                (buf.start_episode(payload) if kind == "reset" else buf.add(*payload))
        runs[scheme] = out
        buf.close()
    for scheme in SCHEMES[1:]:
        for got, ref in zip(runs[scheme], runs["float32"]):
            assert all(np.array_equal(a, b) for a, b in zip(got, ref)), scheme


def test_prefetch_draws_what_sample_draws_on_a_static_buffer(tmp_path):
    buf = fill(ReplayBuffer(500, (6, 5), 4, "disk", directory=tmp_path), episodes())
    rng = np.random.default_rng(2)
    plain = [buf.sample(8, rng) for _ in range(4)]
    with BatchPrefetcher(buf, 8, np.random.default_rng(2)) as pre:
        fetched = [pre.next() for _ in range(4)]
    for a, b in zip(plain, fetched):
        assert all(np.array_equal(x, y) for x, y in zip(a, b))
    buf.close()


def test_clear_errors():
    with pytest.raises(TypeError, match="QuantizeObservation"):
        ReplayBuffer(10, (4,), 1, "dedup", frame_dtype="float32")
    with pytest.raises(ValueError, match="unknown storage"):
        ReplayBuffer(10, (4,), 1, "zip")
    buf = ReplayBuffer(10, (4,), 1, "uint8")
    with pytest.raises(RuntimeError, match="start_episode"):
        buf.add(0, 1.0, np.zeros(4, np.uint8))
    with pytest.raises(TypeError, match="uint8"):
        buf.start_episode(np.zeros(4, np.float32))
    with pytest.raises(ValueError, match="shape"):
        buf.start_episode(np.zeros(5, np.uint8))
    buf.start_episode(np.zeros(4, np.uint8))
    with pytest.raises(ValueError, match="no transition"):
        buf.sample(4, np.random.default_rng(0))


def test_evicting_the_page_cache_keeps_the_data(tmp_path):
    buf = fill(ReplayBuffer(100, (8, 8), 4, "disk", directory=tmp_path), episodes(frame=(8, 8)))
    before = buf.sample(16, np.random.default_rng(0))
    buf.store.evict()
    after = buf.sample(16, np.random.default_rng(0))
    assert all(np.array_equal(a, b) for a, b in zip(before, after))
    buf.close()
