"""Figures: a DQN's replay memory, stored four ways (reinforcement learning on CartPole-v1).

- ``rl_replay_bytes.png``: bytes per transition and total bytes at 1M transitions for the four
  storage schemes, on Atari-sized observations (4 stacked 84 x 84 frames of pixel CartPole).
  Measured with the ledger at two small capacities, extrapolated with each scheme's formula;
  the formula is checked against every measurement.
- ``rl_learning.png``: episode return against environment steps, 3 seeds, for the naive buffer
  (float32, raw state, next state duplicated) and the smallest in-memory one (uint8 state, each
  observation once). The learning runs use CartPole's 4-number state, not pixels: a DQN from
  pixels needs hours on 2 CPU cores, and the storage schemes are the same code either way.
- ``rl_sampling.png``: time to sample a batch of 32 from each scheme (pixels), taken in turns,
  median and interquartile range; the disk scheme warm (page cache), cold (evicted before each
  batch) and cold with the batch prefetched while the learner works.
"""
import concurrent.futures
import multiprocessing
import os
import sys
import time
import tracemalloc

import numpy as np

from .. import memory
from ..measure.claims import Claim
from ..measure.timing import interleaved_samples, spread
from ..rl import BatchPrefetcher, ReplayBuffer, bytes_per_slot
from ..rl.replay import INDEX_BYTES_PER_SLOT
from . import refuse_device

NAME = "rl"
ORDER = 80
FIGURES = ["rl_replay_bytes.png", "rl_learning.png", "rl_sampling.png"]

SCHEMES = ["float32", "uint8", "dedup", "disk"]
FRAME, STACK, BATCH, MILLION = (84, 84), 4, 32, 1_000_000
RUNS = {"naive": ("float32", "state"), "compact": ("dedup", "uint8")}
LEARNER_BUSY_S = 0.005  # what a learner does between two batches in the prefetch timing


def _pixel_events(steps, seed=0):
    """Pixel CartPole under a random policy: the same reset frames and steps for every scheme."""
    from ..rl import envs
    env = envs.make_cartpole("pixels", *FRAME)
    rng, events = np.random.default_rng(seed), []
    frame, _ = env.reset(seed=seed)
    events.append(("reset", frame))
    for _ in range(steps):
        action = int(rng.integers(2))
        frame, reward, terminated, truncated, _ = env.step(action)
        events.append(("step", (action, reward, frame, terminated)))
        if terminated or truncated:
            frame, _ = env.reset()
            events.append(("reset", frame))
    env.close()
    return events


def _fill(buffer, events):
    for kind, payload in events:
        buffer.start_episode(payload) if kind == "reset" else buffer.add(*payload)
    return buffer


def run_bytes(events, capacities):
    rows = []
    for scheme in SCHEMES:
        for capacity in capacities:
            before = {p: memory.live_bytes(place=p) for p in ("host", "disk")}
            tracemalloc.start()
            buf = _fill(ReplayBuffer(capacity, FRAME, STACK, scheme), events)
            traced = tracemalloc.get_traced_memory()[0]
            tracemalloc.stop()
            ledger = {p: memory.live_bytes(place=p) - before[p] for p in ("host", "disk")}
            rows.append({"scheme": scheme, "capacity": capacity, "ledger_host": ledger["host"],
                         "ledger_disk": ledger["disk"], "tracemalloc": traced,
                         "formula": capacity * bytes_per_slot(scheme, FRAME, STACK)})
            buf.close()
            del buf  # now, not when the next buffer takes the name (after the next 'before')
    per_slot = {s: bytes_per_slot(s, FRAME, STACK) for s in SCHEMES}
    return {"rows": rows, "per_transition": per_slot, "at_1M": {s: MILLION * b for s, b in per_slot.items()},
            "index_bytes_per_slot": INDEX_BYTES_PER_SLOT}


def run_sampling(events, capacity, repeats):
    buffers = {s: _fill(ReplayBuffer(capacity, FRAME, STACK, s), events) for s in SCHEMES}
    rngs = {s: np.random.default_rng(1) for s in SCHEMES}
    identical = True
    for _ in range(3):
        batches = {s: buffers[s].sample(BATCH, rngs[s]) for s in SCHEMES}
        identical &= all(np.array_equal(a, b) for s in SCHEMES[1:] for a, b in zip(batches[s], batches["float32"]))
    disk = buffers["disk"]
    rng = np.random.default_rng(2)
    prefetcher = BatchPrefetcher(disk, BATCH, np.random.default_rng(3))

    def timed(fn):
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def cold():
        disk.store.evict()
        return timed(lambda: disk.sample(BATCH, rng))

    def cold_prefetched():
        disk.store.evict()
        prefetcher.next()  # hands out a batch and starts reading the next one from the cold file
        time.sleep(LEARNER_BUSY_S)  # the learner's step, during which that read runs
        return timed(prefetcher.next)  # only the wait that prefetch did not hide

    cold.self_timed = cold_prefetched.self_timed = True  # each returns the seconds that count
    timers = {s: (lambda s=s: buffers[s].sample(BATCH, rngs[s])) for s in SCHEMES}
    timers.update({"disk, cold": cold, "disk, cold, prefetched": cold_prefetched})
    # in turns, so machine drift touches every scheme alike
    summary = {name: spread(t) for name, t in interleaved_samples(timers, repeats).items()}
    prefetcher.close()
    for buf in buffers.values():
        buf.close()
    return {"capacity": capacity, "batch": BATCH, "repeats": repeats, "identical_batches": bool(identical),
            "seconds": summary, "learner_busy_s": LEARNER_BUSY_S}


def run_learning(quick, seeds, workers=None):
    """Every (seed, buffer) run, ``workers`` at a time (default: one per core), each in a forked
    process with one BLAS thread. A run depends only on its seed, so the records are the same as
    one after another (bit for bit but ``seconds``); the wall time is divided by the workers (on
    2 cores the full run's six trainings took 1,743 s one after another). Runs go seed by seed,
    naive then compact, so that machine drift touches both buffers alike."""
    from ..rl.train import train_cartpole
    settings = dict(total_steps=3_000, eval_every=1_000, final_eval_episodes=20, learning_starts=500,
                    train_freq=64, gradient_steps=16) if quick else {}
    jobs = [(seed, label) for seed in seeds for label in RUNS]
    workers = max(1, min(len(jobs), workers or os.cpu_count() or 1))
    if workers == 1 or sys.platform != "linux":  # fork is Linux's: elsewhere it is unsafe or absent
        return [dict(train_cartpole(*RUNS[label], seed=seed, **settings), label=label) for seed, label in jobs]
    # fork, not spawn: a spawned child imports the caller's main module again, and a script
    # without `if __name__ == "__main__":` would start the whole run over in each worker. A forked
    # child's copy of the ledger counts only its own training from there on.
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = [pool.submit(train_cartpole, *RUNS[label], seed=seed, **settings) for seed, label in jobs]
        return [dict(f.result(), label=label) for f, (_, label) in zip(futures, jobs)]


def run(quick=False, device="cpu"):
    refuse_device(NAME, device)
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        return {"skipped": "gymnasium missing: pip install -e '.[apps]'"}
    events = _pixel_events(600 if quick else 2_400)
    records = {"config": {"frame": FRAME, "stack": STACK, "batch": BATCH}}
    records["bytes"] = run_bytes(events, [100, 300] if quick else [500, 2_000])
    records["sampling"] = run_sampling(events, 300 if quick else 2_000, 30 if quick else 200)
    records["learning"] = run_learning(quick, [0, 1] if quick else [0, 1, 2])
    return records


def _bytes_ratio(r):
    per = r["bytes"]["per_transition"]
    return per["float32"] / per["dedup"], per["float32"] / per["dedup"] >= 16


def _formula_error(r):
    worst = max(abs(x["ledger_host"] + x["ledger_disk"] - x["formula"]) for x in r["bytes"]["rows"])
    return worst, worst == 0


def _solved(r):
    finals = [x["final"]["mean"] for x in r["learning"] if x["label"] == "compact"]
    return min(finals), min(finals) >= 475


CLAIMS = [
    Claim("bytes_16x", "frames stored once take >= 16x fewer bytes per transition than float32 stacks",
          _bytes_ratio),
    Claim("formula", "each scheme's bytes formula equals the ledger at every measured capacity", _formula_error),
    Claim("identical", "all four schemes return bit-identical batches for one seed",
          lambda r: (r["sampling"]["identical_batches"], r["sampling"]["identical_batches"])),
    Claim("disk_ram", "the disk scheme keeps only the 13-byte index per transition in RAM",
          lambda r: (max(x["ledger_host"] / x["capacity"] for x in r["bytes"]["rows"] if x["scheme"] == "disk"),
                     all(x["ledger_host"] == 13 * x["capacity"] for x in r["bytes"]["rows"] if x["scheme"] == "disk"))),
    Claim("solved", "the compact buffer solves CartPole-v1: mean return >= 475 over 100 episodes, every seed",
          _solved, modes=("full",)),
]


def plot(records, outdir):
    from . import rl_plots
    if "skipped" in records:
        return [rl_plots.skipped(records, outdir, name) for name in FIGURES]
    return [rl_plots.plot_bytes(records, outdir, FIGURES[0]), rl_plots.plot_learning(records, outdir, FIGURES[1]),
            rl_plots.plot_sampling(records, outdir, FIGURES[2])]
