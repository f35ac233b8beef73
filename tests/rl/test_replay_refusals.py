"""What the replay buffer, its prefetcher and DQN refuse, and that a refused step changes nothing."""
import threading

import numpy as np
import pytest

from tinymem.rl import DQN, Batch, BatchPrefetcher, ReplayBuffer, bytes_per_slot

SCHEMES = ["float32", "uint8", "dedup", "disk"]


def started(scheme, capacity=10, frame_stack=1, **kw):
    buf = ReplayBuffer(capacity, (2,), frame_stack, scheme, **kw)
    buf.start_episode(np.zeros(2, np.uint8))
    return buf


def last_obs(buf):
    """The newest frame of the obs stack of the transition ending at the newest slot."""
    return buf.gather(np.array([buf.written - 1])).obs[0, -1].tolist()


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("action,reward,terminated,error", [
    (2**40, 0.0, False, ValueError), (-1, 0.0, False, ValueError), (1.5, 0.0, False, TypeError),
    (0, float("nan"), False, ValueError), (0, float("inf"), False, ValueError),
    (0, "1", False, TypeError), (0, 0.0, "yes", TypeError)])
def test_a_refused_step_stores_nothing(scheme, action, reward, terminated, error):
    """``add(action=2**40)`` used to raise NumPy's OverflowError after the frame had entered the
    stacking window: the next transition's obs was then the refused frame, [1, 99]."""
    with started(scheme) as buf:
        buf.add(0, 0.0, np.array([0, 1], np.uint8))
        written = buf.written
        with pytest.raises(error):
            buf.add(action, reward, np.array([1, 99], np.uint8), terminated)
        assert buf.written == written
        buf.add(1, 0.5, np.array([2, 2], np.uint8))
        assert last_obs(buf) == [0, 1]


def test_n_actions_bounds_the_action():
    with started("dedup", n_actions=2) as buf:
        buf.add(1, 0.0, np.ones(2, np.uint8))
        with pytest.raises(ValueError, match=r"\[0, 2\)"):
            buf.add(2, 0.0, np.ones(2, np.uint8))
    with pytest.raises(ValueError, match="n_actions"):
        ReplayBuffer(10, (2,), n_actions=0)


def test_frame_stack_must_fit_in_the_capacity():
    """``ReplayBuffer(2, shape, frame_stack=5)`` was accepted and could never be sampled."""
    with pytest.raises(ValueError, match="at least 6"):
        ReplayBuffer(2, (2,), frame_stack=5)
    with pytest.raises(ValueError, match="at least 5"):
        ReplayBuffer(4, (2,), frame_stack=4)
    with started("dedup", capacity=5, frame_stack=4) as buf:  # the smallest that fits
        for i in range(20):
            buf.add(0, 0.0, np.full(2, i, np.uint8))
        assert len(buf) == 1


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_closed_buffer_says_so(scheme):
    buf = started(scheme)
    buf.add(0, 0.0, np.ones(2, np.uint8))
    buf.close()
    buf.close()  # twice is allowed
    assert buf.closed and buf.nbytes["disk"] == 0
    for use in (lambda: buf.add(0, 0.0, np.ones(2, np.uint8)), lambda: buf.start_episode(np.ones(2, np.uint8)),
                lambda: buf.sample(1, np.random.default_rng(0)), lambda: buf.gather(np.array([1]))):
        with pytest.raises(RuntimeError, match="closed"):
            use()
    with pytest.raises(RuntimeError, match="closed"):
        BatchPrefetcher(buf, 1, np.random.default_rng(0))


def test_gather_refuses_slots_that_hold_no_transition():
    """``gather`` of a slot number never written (or overwritten) returned another slot's frames."""
    with started("dedup") as buf:
        buf.add(0, 0.0, np.ones(2, np.uint8))
        assert buf.gather(np.array([1])).next_obs[0, -1].tolist() == [1, 1]
        for numbers in ([50], [0], [1, 2]):  # never written; the reset slot; one of each
            with pytest.raises(ValueError, match="end no transition"):
                buf.gather(np.array(numbers))


def test_bytes_per_slot_names_the_storages():
    with pytest.raises(ValueError, match="unknown storage 'zip'"):  # was a KeyError
        bytes_per_slot("zip", (2,))


def _threads():
    return {t for t in threading.enumerate() if t.is_alive()}


@pytest.mark.parametrize("batch_size,rng,error", [(0, np.random.default_rng(0), ValueError),
                                                  (2.0, np.random.default_rng(0), ValueError),
                                                  (2, 7, TypeError)])
def test_prefetcher_checks_before_starting_its_thread(batch_size, rng, error):
    """``BatchPrefetcher(buf, batch_size=0)`` started its thread, raised only at ``next()``, and
    left the thread running."""
    with started("dedup") as buf:
        buf.add(0, 0.0, np.ones(2, np.uint8))
        before = _threads()
        with pytest.raises(error):
            BatchPrefetcher(buf, batch_size, rng)
        assert _threads() == before
    with pytest.raises(TypeError, match="ReplayBuffer"):
        BatchPrefetcher([1, 2], 1, np.random.default_rng(0))


def test_a_closed_prefetcher_refuses_next_instead_of_waiting_forever():
    with started("dedup") as buf:
        buf.add(0, 0.0, np.ones(2, np.uint8))
        pre = BatchPrefetcher(buf, 2, np.random.default_rng(0))
        pre.next()
        pre.close()
        pre.close()
        with pytest.raises(RuntimeError, match="closed"):
            pre.next()


def _batch(action, reward):
    obs = np.zeros((2, 1, 4), np.float32)
    return Batch(obs, np.asarray(action), np.asarray(reward, np.float32), obs, np.zeros(2, np.float32))


@pytest.mark.parametrize("action,reward,match", [([0, 2], [0, 0], r"action 2 is outside \[0, 2\)"),
                                                 ([-1, 0], [0, 0], r"action -1 is outside"),
                                                 ([0, 1], [0, np.nan], "not finite")])
def test_dqn_refuses_a_batch_it_would_train_on_wrongly(action, reward, match):
    """An action equal to ``n_actions`` raised a raw IndexError; -1 trained the last action; a
    NaN reward made every weight NaN."""
    agent = DQN((1, 4), 2, hidden=(8,))
    with pytest.raises(TypeError, match="replay Batch"):  # was an AttributeError
        agent.update(None)
    before = [p.data.copy() for p in agent.online.parameters()]
    with pytest.raises(ValueError, match=match):
        agent.update(_batch(action, reward))
    assert all(np.array_equal(p.data, b) for p, b in zip(agent.online.parameters(), before))
    agent.update(_batch([0, 1], [0.5, -1.0]))  # a good batch still trains
    assert not all(np.array_equal(p.data, b) for p, b in zip(agent.online.parameters(), before))
