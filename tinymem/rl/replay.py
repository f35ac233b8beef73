"""ReplayBuffer: one interface over four storage schemes, and one index that samples alike.

A DQN learns from transitions ``(obs, action, reward, next_obs, done)`` drawn uniformly from the
last ``capacity`` environment steps. An observation is a stack of the last ``frame_stack`` frames
(Atari DQN: 4 frames of 84 x 84), so storing it naively repeats every frame 2·k times: once per
stack it appears in, and again as part of ``next_obs``.

**The index** (shared by every scheme). The buffer is a ring of ``capacity`` slots, one per
environment step, in the order they happen. A slot holds the frame the step produced, the
action, the reward, ``terminated``, and the step number inside the episode (0 marks the reset
frame of an episode, which ends no transition). The transition ending at slot n has
``obs`` = the stack ending at slot n-1 and ``next_obs`` = the stack ending at slot n. The stack
ending at slot m holds the frames at slots

    m - min(j, step[m])   for j = k-1, ..., 1, 0                (frame-dedup index arithmetic)

so at the start of an episode the missing frames repeat the reset frame (as Gymnasium's
``FrameStackObservation`` pads) and a stack never mixes two episodes. Slot n can be sampled when
it ends a transition (step[n] > 0) and every frame of its ``obs`` stack is still in the ring:
n - 1 - min(k-1, step[n]-1) >= written - capacity (slot numbers count every step ever added).
``done`` is ``terminated`` only: an episode cut by the time limit (``truncated``) still
bootstraps from ``next_obs``, which is why the last frame of every episode is kept.

Every scheme uses this index and the same random draws; only where the frames live differs. So
for one seed all four return bit-identical batches (float32 arrays), and a DQN learns exactly
the same with any of them.

**Memory per slot** (F = bytes of one uint8 frame, k = frame_stack; the index adds 13 bytes:
int32 step, int32 action, float32 reward, bool terminated), from ``storage.py``:

    float32   2·k·F·4   obs and next_obs stacks in float32      (Atari: 225,792 B)
    uint8     2·k·F     the same stacks in uint8                (56,448 B)
    dedup     F         each frame once                         (7,056 B)
    disk      F on disk, the index in RAM                       (7,056 B of disk)

The buffer lives in host memory (``place="host"``; on a GPU it stays in host RAM and only the
sampled batch goes to the device) or on disk (``place="disk"``), in the ledger's ``workspace``
bucket.
"""
import math
from collections import namedtuple

import numpy as np

from .. import memory
from ..checks import is_int, positive_int, real_number
from . import storage as S

Batch = namedtuple("Batch", "obs action reward next_obs done")
Batch.__doc__ = """A sampled batch: obs and next_obs float32 (B, k, *frame), action int64 (B,),
reward float32 (B,), done float32 (B,) (1.0 where the episode terminated)."""

INDEX_BYTES_PER_SLOT = 13
ACTION_LIMIT = 2**31  # actions are kept as int32


def stack_slots(ends, steps, frame_stack):
    """Slot numbers of the stacks ending at slots ``ends`` (B,), whose step numbers are
    ``steps`` (B,): an int64 (B, k) array, oldest frame first, episode starts repeated."""
    back = np.arange(frame_stack - 1, -1, -1)
    return ends[:, None] - np.minimum(back[None, :], steps[:, None])


class ReplayBuffer:
    """A ring of ``capacity`` environment steps behind one interface, stored as ``storage``:
    ``"float32"``, ``"uint8"``, ``"dedup"`` or ``"disk"`` (see the module docstring).

        buf = ReplayBuffer(10_000, (84, 84), frame_stack=4, storage="dedup")
        buf.start_episode(first_frame)
        buf.add(action, reward, next_frame, terminated)
        batch = buf.sample(32, rng)

    ``frame_dtype`` is the dtype of the frames given to it: ``"uint8"`` (pixels, quantized
    states) or ``"float32"`` (raw states, only with ``storage="float32"``). ``directory`` is
    where ``"disk"`` puts its (unnamed, self-deleting) file. ``n_actions``, when given, is the
    number of discrete actions: :meth:`add` refuses an action outside ``[0, n_actions)``. Call
    :meth:`close` or use ``with``; a closed buffer refuses every further use.
    """

    def __init__(self, capacity, frame_shape, frame_stack=1, storage="dedup", frame_dtype="uint8",
                 directory=None, n_actions=None):
        if not is_int(capacity) or capacity < 2:
            raise ValueError(f"capacity must be an integer of at least 2 steps, got {capacity!r}")
        self.capacity, self.frame_stack = int(capacity), positive_int("frame_stack", frame_stack)
        if self.frame_stack >= self.capacity:  # no stack of k frames plus the next one would fit
            raise ValueError(f"capacity {capacity} cannot hold one transition of frame_stack {frame_stack}: "
                             f"its obs and next_obs span {frame_stack + 1} steps; give a capacity of at "
                             f"least {frame_stack + 1}")
        self.n_actions = None if n_actions is None else positive_int("n_actions", n_actions)
        if not isinstance(frame_shape, (tuple, list)) or not all(is_int(n) and n >= 1 for n in frame_shape):
            raise ValueError(f"frame_shape must be a tuple of positive sizes, e.g. (84, 84) or (4,), got {frame_shape!r}")
        try:
            self.frame_shape, self.frame_dtype = tuple(frame_shape), np.dtype(frame_dtype)
        except TypeError:
            raise TypeError(f"frame_dtype must be a NumPy dtype such as 'uint8' or 'float32', got {frame_dtype!r}") from None
        self.store = S.make_storage(storage, self.capacity, self.frame_shape, self.frame_stack,
                                    self.frame_dtype, directory)
        self.step = memory.register(np.zeros(capacity, np.int32), "workspace", "host", label="replay index")
        self.action = memory.register(np.zeros(capacity, np.int32), "workspace", "host", label="replay index")
        self.reward = memory.register(np.zeros(capacity, np.float32), "workspace", "host", label="replay index")
        self.terminated = memory.register(np.zeros(capacity, bool), "workspace", "host", label="replay index")
        self.written = 0
        # Reads running on a background thread: (ring slots they read, job). A write to one of
        # those slots waits for the read first, so a prefetched batch is never half overwritten.
        self.in_flight = []
        # The last k+1 frames of the episode in progress: what the stacking schemes store.
        self.window = None

    # -- writing ---------------------------------------------------------------------------
    def _check_frame(self, frame):
        frame = np.asarray(frame)
        if frame.shape != self.frame_shape:
            raise ValueError(f"frame of shape {frame.shape}, but this buffer stores {self.frame_shape}")
        if self.frame_dtype == np.uint8 and frame.dtype != np.uint8:
            raise TypeError(f"this buffer stores uint8 frames, got {frame.dtype}: quantize the "
                            f"observation first (rl.envs.QuantizeObservation or PixelObservation)")
        return frame.astype(self.frame_dtype, copy=False)

    def _check_open(self):
        if self.store is None:
            raise RuntimeError("this ReplayBuffer is closed (its frames are freed): make a new one")

    def _check_step(self, action, reward, terminated):
        """The index fields of one step, refused before anything is stored: a step refused half
        way would leave its frame in the window and shift every later observation by one."""
        if not is_int(action):  # NumPy: "setting an array element with a sequence"
            raise TypeError(f"action must be an integer (a discrete action), got {action!r}")
        limit = ACTION_LIMIT if self.n_actions is None else self.n_actions
        if not 0 <= action < limit:
            raise ValueError(f"action must be in [0, {limit}) (an index into the actions, as the "
                             f"Q-network's outputs are), got {action}")
        reward = real_number("reward", reward)
        if not math.isfinite(reward):  # one such reward makes every weight of a DQN NaN
            raise ValueError(f"reward must be finite, got {reward}: clip or fix the environment's reward")
        if not (isinstance(terminated, (bool, np.bool_)) or (is_int(terminated) and terminated in (0, 1))):
            raise TypeError(f"terminated must be a bool, got {terminated!r}")
        return int(action), reward, bool(terminated)

    def start_episode(self, frame):
        """Store the reset frame of a new episode (it ends no transition)."""
        self._check_open()
        frame = self._check_frame(frame)
        self.window = np.repeat(frame[None], self.frame_stack + 1, axis=0)
        self._write(0, 0.0, False, start=True)

    def add(self, action, reward, frame, terminated=False):
        """Store one step: the ``action`` taken, the ``reward`` and ``frame`` it produced, and
        whether the episode ``terminated`` (a time-limit cut is not termination)."""
        self._check_open()
        if self.window is None:
            raise RuntimeError("call start_episode(reset_frame) before add()")
        frame = self._check_frame(frame)
        action, reward, terminated = self._check_step(action, reward, terminated)
        self.window = np.concatenate([self.window[1:], frame[None]])
        previous = self.step[(self.written - 1) % self.capacity]
        self._write(action, reward, terminated, start=False, step=previous + 1)

    def _write(self, action, reward, terminated, start, step=0):
        slot = self.written % self.capacity
        for slots, job in self.in_flight:
            if slot in slots:
                job.wait()
        self.store.write(slot, self.window, start)
        self.step[slot], self.action[slot] = step, action
        self.reward[slot], self.terminated[slot] = reward, terminated
        self.written += 1

    # -- sampling -------------------------------------------------------------------------
    @property
    def oldest(self):
        """Slot number (counting every step ever added) of the oldest step still stored."""
        return max(0, self.written - self.capacity)

    def sampleable(self, numbers):
        """Which slot numbers end a transition whose frames are all still stored."""
        numbers = np.asarray(numbers, np.int64)
        steps = self.step[numbers % self.capacity].astype(np.int64)
        inside = (numbers >= self.oldest) & (numbers < self.written)
        return inside & (steps > 0) & (numbers - 1 - np.minimum(self.frame_stack - 1, steps - 1) >= self.oldest)

    def __len__(self):
        """Number of transitions that can be sampled now."""
        return int(self.sampleable(np.arange(self.oldest, self.written)).sum())

    def sample_numbers(self, batch_size, rng):
        """``batch_size`` slot numbers drawn uniformly from the sampleable ones (rejection: draw
        among all stored slots, redraw the few that end no transition)."""
        self._check_open()
        positive_int("batch_size", batch_size)
        if not hasattr(rng, "integers"):
            raise TypeError(f"rng must be a NumPy Generator, e.g. np.random.default_rng(0), got {rng!r}")
        chosen = np.empty(0, np.int64)
        for _ in range(64):
            draw = rng.integers(self.oldest, max(self.written, self.oldest + 1), batch_size - chosen.size)
            chosen = np.concatenate([chosen, draw[self.sampleable(draw)]])
            if chosen.size == batch_size:
                return chosen
        valid = np.flatnonzero(self.sampleable(np.arange(self.oldest, self.written))) + self.oldest
        if valid.size == 0:
            raise ValueError("the buffer holds no transition yet: add() at least one step after "
                             f"start_episode() (and {self.frame_stack - 1} more for full stacks)")
        return np.concatenate([chosen, rng.choice(valid, batch_size - chosen.size)])

    def sample(self, batch_size, rng):
        """A :class:`Batch` of ``batch_size`` transitions drawn with ``rng`` (a NumPy Generator)."""
        return self.gather(self.sample_numbers(batch_size, rng))

    def positions(self, numbers):
        """Ring slots of (obs stacks, next_obs stacks) of the transitions ending at ``numbers``."""
        steps = self.step[numbers % self.capacity].astype(np.int64)
        next_pos = stack_slots(numbers, steps, self.frame_stack) % self.capacity
        obs_pos = stack_slots(numbers - 1, steps - 1, self.frame_stack) % self.capacity
        return obs_pos, next_pos

    def gather(self, numbers, out=None):
        """The :class:`Batch` of the transitions ending at slot ``numbers``."""
        self._check_open()
        numbers = np.asarray(numbers, np.int64)
        held = self.sampleable(numbers)
        if not held.all():  # a slot overwritten or never written: another transition's frames
            raise ValueError(f"gather: slot numbers {numbers[~held][:5].tolist()} end no "
                             f"transition still stored (held: ends of transitions in [{self.oldest}, "
                             f"{self.written}); see sampleable())")
        slots = numbers % self.capacity
        obs_pos, next_pos = self.positions(numbers)
        obs, next_obs = self.store.read(slots, obs_pos, next_pos, out)
        return Batch(obs, self.action[slots].astype(np.int64), self.reward[slots].copy(), next_obs,
                     self.terminated[slots].astype(np.float32))

    # -- memory ---------------------------------------------------------------------------
    @property
    def nbytes(self):
        """Bytes of this buffer in host RAM and on disk: ``{"host": ..., "disk": ...}``."""
        index = self.step.nbytes + self.action.nbytes + self.reward.nbytes + self.terminated.nbytes
        if self.store is None:
            return {"host": index, "disk": 0}
        return {"host": index + self.store.host_bytes, "disk": self.store.disk_bytes}

    @property
    def closed(self):
        return self.store is None

    def close(self):
        """Free the storage (the disk scheme's file disappears). Closing twice is allowed."""
        if self.store is not None:
            self.store.close()
            self.store = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def bytes_per_slot(storage, frame_shape, frame_stack=1, frame_dtype="uint8"):
    """Bytes one slot costs in ``storage`` (index included), by the formula of each scheme."""
    if storage not in S.SCHEMES:
        raise ValueError(f"unknown storage {storage!r}; choose one of {', '.join(S.SCHEMES)}")
    return S.SCHEMES[storage].bytes_per_slot(tuple(frame_shape), frame_stack, np.dtype(frame_dtype)) + \
        INDEX_BYTES_PER_SLOT
