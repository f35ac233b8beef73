# %% [markdown]
# # Lesson 10 — Reinforcement learning: a replay memory that fits
#
# A DQN (Mnih et al. 2015) learns from a **replay buffer**: the last N environment steps,
# sampled uniformly, so consecutive (and strongly correlated) steps do not all land in one
# gradient step. On Atari the network is a few MB; the buffer holds N = 1,000,000 steps of 4
# stacked 84 x 84 frames and is the memory that hurts. Where does it live? In **host RAM**
# (even when the network trains on a GPU, only the sampled batch travels to the device), or on
# **disk**; the ledger counts it at place `host` or `disk`, bucket `workspace`.
#
# Sources: `tinymem/rl/replay.py` (the index, one interface), `tinymem/rl/storage.py` (the four
# schemes), `tinymem/rl/prefetch.py`, `tinymem/rl/dqn.py`, `tinymem/rl/envs.py` (CartPole through
# Gymnasium, rendered to pixels with NumPy), `tinymem/experiments/rl.py` (the figures).

# %%
import os

import numpy as np

import tinymem as tm
from tinymem import memory
from tinymem.experiments import rl as exp
from tinymem.measure.records import read_records
from tinymem.rl import ReplayBuffer, bytes_per_slot, envs
from tinymem.rl.train import train_cartpole

QUICK = os.environ.get("TINYMEM_QUICK") == "1"
from course import FIGURES, OUT, check, predict, reveal  # OUT: where figures go (lessons/out/, git-ignored)
tm.manual_seed(0)

# %% [markdown]
# ## 1. The observation: pixels, as on Atari
#
# CartPole-v1 gives 4 numbers (cart position and velocity, pole angle and angular velocity).
# To hold images as Atari does, `envs.PixelObservation` draws the state into an 84 x 84
# grayscale frame with NumPy alone (no pygame, no display). One frame shows position and angle;
# velocity needs two frames, hence **frame stacking**: the agent sees the last k = 4 frames.

# %%
env = envs.make_cartpole("pixels")
frame, _ = env.reset(seed=0)
print("one frame:", frame.shape, frame.dtype, f"{frame.nbytes:,} bytes; gray levels", np.unique(frame))
for row in frame[39:65:2, 30:54]:
    print("".join(" .o#"[[0, 64, 160, 255].index(v)] for v in row))

# %% [markdown]
# ## 2. What a transition costs, four ways
#
# A transition is (obs, action, reward, next_obs, done) with obs and next_obs stacks of k
# frames. Stored naively (the obvious `np.zeros((N, k, 84, 84), np.float32)` twice), every frame
# is kept **2·k times, in 4 bytes each**: once in each stack it appears in, and again in the
# next_obs of the step before. Three cures stack up: uint8 (pixels are 0..255: 4x), then each
# frame once with stacks rebuilt by index (2·k = 8x), then the frames on disk (RAM: only the
# 13-byte index per step). The formulas (`bytes_per_slot`) against the ledger:

# %%
events = exp._pixel_events(300)
for scheme in ["float32", "uint8", "dedup", "disk"]:
    before = {p: memory.live_bytes(place=p) for p in ("host", "disk")}
    buf = exp._fill(ReplayBuffer(200, (84, 84), 4, scheme), events)
    host = memory.live_bytes(place="host") - before["host"]
    disk = memory.live_bytes(place="disk") - before["disk"]
    per = bytes_per_slot(scheme, (84, 84), 4)
    print(f"{scheme:8s} ledger host {host / 200:9,.0f} B + disk {disk / 200:6,.0f} B per step "
          f"(formula {per:,} B) -> 1M steps: {per * 1e6 / 2**30:7.2f} GiB")
    buf.close()
    del buf

# %% [markdown]
# ## 3. The index: each frame once, stacks rebuilt by arithmetic
#
# The buffer is a ring of slots, one per environment step, with the frame the step produced and
# its **step number inside the episode** (0 for the reset frame, which ends no transition). The
# transition ending at slot n has next_obs = the stack ending at n and obs = the stack ending at
# n - 1. The stack ending at slot m is the k slots up to m, except that it never reaches back
# past its episode's reset frame (the step number says how far back that is): near an episode
# start the missing frames repeat the reset frame, and **no stack ever mixes two episodes**
# (exercise 1 writes this arithmetic). Two more rules: a slot is sampleable only if every frame
# of its obs stack is still in the ring (the ring overwrites the oldest slots), and `done` is
# `terminated` only: a time-limit cut (`truncated`) must still bootstrap from next_obs.

# %%
predict("with k = 4, an episode of frames 0 (reset), 1, 2, 3, 4 (terminated there), then a new "
        "episode: reset frame 100, then frame 101. Which four frames are the obs and the next_obs of "
        "the transition that ends at frame 101? And which transitions can be sampled at all?")

# %%
buf = ReplayBuffer(12, (1,), 4, "dedup")
buf.start_episode(np.array([0], np.uint8))
for t in range(1, 5):
    buf.add(0, 1.0, np.array([t], np.uint8), terminated=t == 4)
buf.start_episode(np.array([100], np.uint8))
buf.add(1, 1.0, np.array([101], np.uint8))
numbers = np.arange(buf.written)
batch = buf.gather(numbers[buf.sampleable(numbers)])
for obs, nxt, done in zip(batch.obs[:, :, 0], batch.next_obs[:, :, 0], batch.done):
    print("obs", obs.astype(int), "-> next", nxt.astype(int), " done" if done else "")
reveal(f"obs {batch.obs[-1, :, 0].astype(int)} -> next {batch.next_obs[-1, :, 0].astype(int)}, "
       f"{len(batch.done)} transitions sampleable", "the new episode's first transition sees only its reset frame, "
       "repeated", batch.obs[-1, :, 0].tolist() == [100] * 4 and batch.next_obs[-1, :, 0].tolist() == [100] * 3 + [101])
check("no sampled stack mixes two episodes",
      all((row < 100).all() or (row >= 100).all() for row in np.concatenate([batch.obs, batch.next_obs], 1)[:, :, 0]))

# %% [markdown]
# ## 4. One interface, bit-identical batches
#
# All four schemes share that index and the same random draws; only where the frames live
# differs. So with one seed they return the **same bits**, and a DQN learns exactly the same
# with any of them (`tests/rl/test_dqn.py` trains twice and compares every episode).

# %%
buffers = {s: exp._fill(ReplayBuffer(200, (84, 84), 4, s), events) for s in ["float32", "uint8", "dedup", "disk"]}
batches = {s: b.sample(32, np.random.default_rng(0)) for s, b in buffers.items()}
print("bit-identical:", all(np.array_equal(x, y) for s in batches for x, y in zip(batches[s], batches["float32"])))

# %% [markdown]
# ## 5. Disk, page cache and prefetch
#
# `storage="disk"` maps the frame array from an **unnamed file** (`tempfile.TemporaryFile`: no
# directory entry, so nothing is left behind even if the process dies). Reading it right after
# writing usually hits the OS page cache (RAM that is not the process's); `evict()` drops the
# file's pages so the next batch really comes from the disk. A `BatchPrefetcher` reads the
# next batch on a background thread while the learner works (here 5 ms of sleep).
#
# One timing of one batch says little: the first call pays for caches, and a shared machine
# adds noise. `exp.run_sampling` takes every scheme in turns, many times each, after a warm-up,
# as the figure `rl_sampling.png` does; below, the median and the quartiles.

# %%
for b in buffers.values():
    b.close()
sampling = exp.run_sampling(events, 200, 10 if QUICK else 60)["seconds"]
for name in ("dedup", "disk", "disk, cold", "disk, cold, prefetched"):
    t = sampling[name]
    print(f"{name:24s} median {t['median'] * 1e3:6.2f} ms  (quartiles {t['q25'] * 1e3:.2f} to {t['q75'] * 1e3:.2f})")
# Where /tmp is itself in RAM (tmpfs), `evict` has no disk to send the pages back to and the two
# are alike: the sentence is checked on the committed figure run, whose file was on a disk.
if (FIGURES / "data" / "rl.json").exists():
    committed = read_records(FIGURES, "rl")["sampling"]["seconds"]
    check(f"a cold read from the disk is slower than one from the page cache (committed run, medians: "
          f"{committed['disk, cold']['median'] * 1e3:.2f} against {committed['disk']['median'] * 1e3:.2f} ms)",
          committed["disk, cold"]["median"] > committed["disk"]["median"])

# %% [markdown]
# ## 6. Learning: does the compact buffer learn as well?
#
# `train_cartpole` runs RL Zoo's tuned DQN for CartPole-v1 (target network refreshed every 10
# steps, epsilon-greedy, Huber loss `F.smooth_l1_loss`, Adam). The learning runs use CartPole's
# 4-number state rather than pixels (a DQN from pixels needs hours on two CPU cores): the naive
# buffer stores the float32 state twice per step; the compact one stores the state as 4 uint8
# codes (`QuantizeObservation`, lesson 3's affine map with fixed ranges), once per step.
#
# It evaluates the greedy policy every few thousand steps and keeps the best weights (as RL
# Zoo's evaluation callback does); the return printed is those kept weights played on fresh
# episodes, not the last weights. One seed of 20,000 steps is a short run of a noisy method:
# the two buffers may land far apart by chance. The question is answered by the figure's runs
# (several seeds, each longer: section 7) and its claim.

# %%
short = dict(total_steps=1_500, learning_starts=300, train_freq=64, gradient_steps=8, eval_every=750,
             eval_episodes=3, final_eval_episodes=5) if QUICK else dict(total_steps=20_000)
returns = []
for storage, observation in (("float32", "state"), ("dedup", "uint8")):
    r = train_cartpole(storage, observation, seed=0, **short)
    returns.append(r["final"]["mean"])
    print(f"{storage:8s} {observation:6s}: {r['buffer_bytes']['host'] / r['config']['buffer_size']:.0f} B per step, "
          f"greedy return of the kept weights {r['final']['mean']:.1f} ({r['final']['episodes']} episodes), "
          f"{r['seconds']:.0f} s")
if QUICK and max(returns) < 50:  # a random policy lasts about 20 steps; these are no better
    print(f"quick mode: {short['total_steps']:,} steps are too few to learn CartPole; returns of "
          f"{', '.join(f'{v:.1f}' for v in returns)} mean nothing was learned. Run without TINYMEM_QUICK.")

# %% [markdown]
# ## 7. The figures
#
# `python -m tinymem figures --only rl` writes `figures/rl_replay_bytes.png`,
# `figures/rl_learning.png` (several seeds per buffer, listed below) and
# `figures/rl_sampling.png`. In quick mode the lesson redraws the committed run:

# %%
if (FIGURES / "data" / "rl.json").exists():
    records = read_records(FIGURES, "rl")
    for path in exp.plot(records, OUT):
        print("wrote", path)
    per = records["bytes"]["per_transition"]
    print(f"per transition: float32 {per['float32']:,} B, dedup {per['dedup']:,} B "
          f"({per['float32'] / per['dedup']:.1f}x less)")
    for r in records["learning"]:
        print(f"{r['label']:8s} seed {r['seed']}: mean return of the kept weights {r['final']['mean']:.1f} over "
              f"{r['final']['episodes']} episodes")
    for row in records["claims"]:
        print(f"claim {row['name']}: {'holds' if row['holds'] else row['holds']} ({row['value']})")

# %% [markdown]
# ## Pitfalls
#
# - **Stacks across episode boundaries.** A stack that reaches into the previous episode shows
#   the agent a pole that teleports. The step number in the index prevents it.
# - **Truncated is not terminated.** CartPole stops at 500 steps; the pole did not fall. Treat
#   it as terminal and the agent learns that the 500th step is deadly.
# - **Overwritten frames.** In a ring, the oldest slots are overwritten first; a transition whose
#   oldest stack frame is gone must not be sampled (`ReplayBuffer.sampleable`).
# - **The page cache is not your memory.** A memory-mapped file's pages may sit in RAM, but the
#   OS reclaims them under pressure; the process's own RAM is only the index.
# - **Convert per batch, not per buffer.** uint8 becomes float32 for the network one batch at a
#   time (batch x 2 stacks x k frames x 84 x 84 x 4 bytes), never the whole buffer.
# - **Prefetch draws ahead.** A prefetched batch's indices are drawn one update early, so the
#   newest step becomes sampleable one update later.
#
# ## Exercises (`lessons/exercises/ex10.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_10`)
#
# 1. `stack_slots(ends, steps, k)`: the frame-dedup index arithmetic.
# 2. `sampleable(numbers, steps, written, capacity, k)`: which slots can be sampled from the ring.
# 3. `bytes_per_transition(scheme, frame_shape, k)`: the memory formula of each scheme, index included.
# 4. `capacity_for_budget(budget_bytes, scheme, frame_shape, k)`: how many steps fit a budget.
