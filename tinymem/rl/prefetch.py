"""Prefetching replay batches: read the next batch on a background thread while the learner works.

With the frames on disk (``storage="disk"``) a batch is B·(k+1)·2 frame reads scattered over the
file. :class:`BatchPrefetcher` draws the *next* batch's slot numbers as soon as it hands out the
current one and reads their frames on a :class:`~tinymem.techniques.offload.prefetch.Worker`
thread (file reads and NumPy copies release the GIL), so the read overlaps the gradient step
and the environment step instead of adding to them. ``wait_s`` is the read time it did not hide.

Contract: the numbers of batch i+1 are drawn when batch i is handed out, so steps added in
between can only be sampled from batch i+2 on; the random draws are otherwise those of
``buffer.sample``, and for one seed every storage scheme gives the same batches. A step added
while a read is in flight waits for that read if it overwrites one of its slots.
Memory: one batch ahead (2·B·k·F·4 bytes of float32 stacks), allocated on the main thread
(so that the ledger counts it when the learner asks for it, not when the read happens to run).
"""
import time

import numpy as np

from .. import memory
from ..checks import positive_int
from ..techniques.offload.prefetch import Worker
from .replay import Batch, ReplayBuffer


class BatchPrefetcher:
    """``next()`` returns a :class:`~tinymem.rl.replay.Batch` of ``batch_size`` drawn with ``rng``
    and starts reading the one after it. Use as a context manager, or call :meth:`close`."""

    def __init__(self, buffer, batch_size, rng):
        # Checked before the worker thread starts: an error after it would leave it running.
        if not isinstance(buffer, ReplayBuffer):
            raise TypeError(f"BatchPrefetcher reads from a ReplayBuffer, got {type(buffer).__name__}")
        if buffer.closed:
            raise RuntimeError("BatchPrefetcher: the ReplayBuffer is closed")
        if not hasattr(rng, "integers"):
            raise TypeError(f"rng must be a NumPy Generator, e.g. np.random.default_rng(0), got {rng!r}")
        self.buffer, self.batch_size, self.rng = buffer, positive_int("batch_size", batch_size), rng
        self.worker, self.pending, self.wait_s = Worker(), None, 0.0

    def _start(self):
        buf = self.buffer
        numbers = buf.sample_numbers(self.batch_size, self.rng)
        slots = numbers % buf.capacity
        obs_pos, next_pos = buf.positions(numbers)
        shape = (self.batch_size, buf.frame_stack) + buf.frame_shape
        out = tuple(memory.register(np.empty(shape, np.float32), "workspace", "host", label="prefetched batch")
                    for _ in range(2))
        # The index is read now, on this thread: a later add() may overwrite these slots.
        rest = (buf.action[slots].astype(np.int64), buf.reward[slots].copy(),
                buf.terminated[slots].astype(np.float32))
        job = self.worker.submit(buf.store.read, slots, obs_pos, next_pos, out)
        entry = (set(np.concatenate([obs_pos.ravel(), next_pos.ravel()]).tolist()), job)
        buf.in_flight.append(entry)
        return out, rest, entry

    def next(self):
        if self.worker is None:  # its thread is gone: a read submitted now would never finish
            raise RuntimeError("this BatchPrefetcher is closed: make a new one")
        if self.pending is None:
            self.pending = self._start()
        (obs, next_obs), (action, reward, done), entry = self.pending
        start = time.perf_counter()
        entry[1].wait()
        self.wait_s += time.perf_counter() - start
        self.buffer.in_flight.remove(entry)
        self.pending = self._start()
        return Batch(obs, action, reward, next_obs, done)

    def close(self):
        """Finish the read in flight and stop the thread. Closing twice is allowed."""
        if self.worker is None:
            return
        if self.pending is not None:
            self.pending[2][1].wait()
            self.buffer.in_flight.remove(self.pending[2])
            self.pending = None
        self.worker.shutdown()
        self.worker = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
