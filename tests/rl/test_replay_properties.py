"""Hypothesis: every storage scheme against a brute-force replay memory, over random streams.

The reference keeps every transition the agent saw, built from the frames as they stream in, with
the slot number of each frame it uses. A transition is still in a ring of ``capacity`` slots
when every one of those slots is among the last ``capacity`` written. No index arithmetic of the
buffer is reused.
"""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tinymem.rl import ReplayBuffer

SCHEMES = ["float32", "uint8", "dedup", "disk"]
FRAME = (2,)

frames = st.lists(st.integers(0, 255), min_size=2, max_size=2).map(lambda v: np.array(v, np.uint8))
steps = st.tuples(st.integers(0, 5), st.floats(-10, 10, width=32), frames, st.booleans())
# An episode: its reset frame and its steps (at least one: a stream must end some transition).
episode_lists = st.lists(st.tuples(frames, st.lists(steps, min_size=1, max_size=12)), min_size=1, max_size=6)


def brute_force(episodes, capacity, k):
    """``{slot number: (obs, next_obs, action, reward, done)}`` of the transitions still held."""
    held, written = {}, 0
    for reset, episode in episodes:
        seen = [(written, reset)] * k  # (slot number, frame): the reset frame fills the stack
        written += 1
        for action, reward, frame, terminated in episode:
            after = seen[1:] + [(written, frame)]
            held[written] = (seen, after, action, np.float32(reward), float(terminated))
            seen = after
            written += 1
    oldest = written - capacity
    return {n: (np.stack([f for _, f in obs]), np.stack([f for _, f in nxt]), a, r, d)
            for n, (obs, nxt, a, r, d) in held.items() if min(s for s, _ in obs + nxt) >= oldest}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(episodes=episode_lists, capacity=st.integers(2, 30), k=st.integers(1, 4), scheme=st.sampled_from(SCHEMES))
def test_a_scheme_holds_exactly_the_transitions_of_a_brute_force_memory(episodes, capacity, k, scheme, tmp_path):
    k = min(k, capacity - 1)
    expected = brute_force(episodes, capacity, k)
    with ReplayBuffer(capacity, FRAME, k, scheme, directory=tmp_path) as buf:
        for reset, episode in episodes:
            buf.start_episode(reset)
            for step in episode:
                buf.add(*step)
        numbers = np.arange(buf.written)
        held = numbers[buf.sampleable(numbers)]
        assert held.tolist() == sorted(expected) and len(buf) == len(expected)
        if not expected:
            return
        batch = buf.gather(held)
        for i, n in enumerate(held):
            obs, nxt, action, reward, done = expected[n]
            assert np.array_equal(batch.obs[i], obs) and np.array_equal(batch.next_obs[i], nxt)
            assert (batch.action[i], batch.reward[i], batch.done[i]) == (action, reward, done)
        drawn = buf.sample_numbers(64, np.random.default_rng(0))
        assert set(drawn.tolist()) <= set(expected)  # sampling draws only held transitions
