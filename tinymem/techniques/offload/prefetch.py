"""Bringing offloaded arrays back before they are needed: a worker thread and a prefetcher.

Backward unpacks saved tensors in (about) the reverse order in which forward packed them. So
when backward asks for one, :class:`Prefetcher` starts loading the next ``depth`` ones below it
on a :class:`Worker` thread while backward computes. Cost: up to ``depth`` arrays on the device
ahead of use. Time: a load that finished in the background costs nothing; ``wait_s`` measures
what was not hidden. A wrong guess (a branchy graph) costs only a synchronous load.
"""
import os
import queue
import threading
import time
import weakref


class _Job:
    __slots__ = ("fn", "args", "error", "done")

    def __init__(self, fn, args):
        self.fn, self.args, self.error, self.done = fn, args, None, threading.Event()

    def wait(self):
        self.done.wait()
        if self.error is not None:
            raise self.error


class Worker:
    """One background thread running copies, reads and writes in the order they were submitted.

    Not a ThreadPoolExecutor: here the thread never drops the last reference to a job's arrays
    or handles (the job keeps them and the main thread drops the job), because that would free
    them, and delete a file, off the main thread, at a moment the main thread did not choose.
    NumPy copies and file I/O release the GIL, so the thread runs beside the compute. Call
    :meth:`shutdown` when done; a worker dropped without it stops its thread as it dies.
    """

    def __init__(self):
        self._queue = queue.SimpleQueue()
        self._pid = os.getpid()
        self._closing = threading.Event()  # set: the jobs not started are skipped
        # The thread holds the queue, not the worker: a worker dropped without shutdown() dies,
        # and its finalizer stops the thread (a None in the queue), which would otherwise wait
        # for a job forever.
        self._thread = threading.Thread(target=_run_jobs, args=(self._queue, self._closing),
                                        name="tinymem-offload", daemon=True)
        self._thread.start()
        self._stop = weakref.finalize(self, self._queue.put, None)

    def submit(self, fn, *args):
        if self._closing.is_set():  # its thread is gone: the job would never run, and wait() never return
            raise RuntimeError("Worker.submit: this worker is shut down; make a new one")
        if self._pid != os.getpid():  # a fork copies the worker, not its thread: the same wait forever
            raise RuntimeError("Worker.submit: this worker was made in the parent process before a fork, "
                               "and its thread is not in this one; make a new one in this process")
        job = _Job(fn, args)
        self._queue.put(job)
        return job

    def shutdown(self):
        """Skip the jobs not started, finish the one running, stop the thread."""
        self._closing.set()
        self._stop()  # the None, once
        self._thread.join()


def _run_jobs(jobs, closing):
    """The worker's thread: run each job until a None comes (skipping them once ``closing``)."""
    while True:
        job = jobs.get()
        if job is None:
            return
        if closing.is_set():  # its caller must not take a read or write that never ran for done
            job.error = RuntimeError("this offload job was skipped: its Worker was shut down before "
                                     "it started; wait for a job before shutting its worker down")
        else:
            try:
                job.fn(*job.args)
            except BaseException as exc:  # handed to the main thread by wait()
                job.error = exc
        done = job.done
        del job
        done.set()


class Prefetcher:
    """Brings stored arrays back, ``depth`` ahead, assuming last packed is first needed.

    ``track(handle)`` numbers handles in pack order; ``get(handle)`` returns the array, from a
    prefetch when one was started, and then starts the next ``depth`` handles below it that are
    still alive and unused. A guess that misses costs nothing but a synchronous load.
    ``depth=0`` turns prefetch off (no thread). ``wait_s`` is the time spent waiting on loads:
    the part of the transfer time that prefetch did not hide. An array saved by two ops (a
    ReLU's output is also the next Linear's input) is stored once (:meth:`share`) and loaded
    once: the first unpack keeps it on the device until the second.
    """

    def __init__(self, store, depth=1):
        if depth < 0:
            raise ValueError(f"prefetch depth must be >= 0, got {depth}")
        self.store, self.depth = store, int(depth)
        self.worker = Worker() if self.depth else None
        self.hits = self.misses = 0
        self.wait_s = 0.0
        self._order = []
        self._pending = {}
        self._uses = {}  # index -> unpacks still expected (an array saved by two ops: 2)
        self._loaded = {}  # index -> array kept for its next unpack
        self._cursor = -1
        self._last = float("inf")

    def track(self, handle):
        handle.index = len(self._order)
        self._order.append(weakref.ref(handle))
        self._uses[handle.index] = 1
        self._cursor = handle.index
        return handle

    def share(self, handle):
        """One more op saved the same array: the first unpack keeps it for the next one."""
        self._uses[handle.index] = self._uses.get(handle.index, 0) + 1
        return handle

    def get(self, handle):
        if handle.index in self._loaded:
            array = self._loaded[handle.index]
            self._release_use(handle.index)
            return array
        array = self._fetch(handle)
        if self._uses.get(handle.index, 0) > 1:
            self._loaded[handle.index] = array
        self._release_use(handle.index)
        return array

    def _release_use(self, index):
        left = self._uses.pop(index, 0) - 1
        if left > 0:
            self._uses[index] = left
        else:
            self._loaded.pop(index, None)

    def _fetch(self, handle):
        pending = self._pending.pop(handle.index, None) if handle.index >= 0 else None
        if handle.index >= 0:
            self._cursor = min(self._cursor, handle.index - 1)
            self._last = handle.index
        if pending is None:
            self.misses += 1
            self._schedule()
            start = time.perf_counter()
            array = self.store.finish_load(self.store.begin_load(handle))
        else:
            self.hits += 1
            self._schedule()
            start = time.perf_counter()
            array = self.store.finish_load(pending)
        self.wait_s += time.perf_counter() - start
        return array

    def _schedule(self):
        if self.worker is None:
            return
        for k in [k for k in self._pending if self._order[k]() is None]:
            del self._pending[k]  # its node was freed without asking for it
        # Prefetches above the last request may still be asked for (a node unpacks its saved
        # tensors in forward order) but no longer count against the depth.
        busy = sum(1 for k in self._pending if k < self._last)
        j = self._cursor
        while busy < self.depth and j >= 0:
            handle = self._order[j]()
            if handle is not None and j not in self._pending:
                self._pending[j] = self.store.begin_load(handle, self.worker)
                busy += 1
            j -= 1
        self._cursor = j

    def close(self):
        """Stop the thread (waiting for a read in progress) and drop prefetched arrays."""
        if self.worker is not None:
            self.worker.shutdown()
            self.worker = None
        self._pending.clear()
        self._loaded.clear()
