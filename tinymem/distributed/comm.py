"""A thin communicator over mpi4py that counts every byte it moves.

Collectives on arrays (NumPy through MPI; CuPy through NCCL, or staged through host memory):

    all_reduce(a)              a <- sum over ranks (in place)
    reduce_scatter(full, out)  out <- this rank's 1/N block of the sum of ``full`` over ranks
    all_gather(shard, out)     out <- every rank's ``shard``, concatenated in rank order
    broadcast(a, root)         a <- root's a (in place)
    send(a, dest) / recv(out, source)   point to point (the pipeline's activations)

``algorithm`` chooses who moves the data of the first three. ``"mpi"`` (the default) calls
MPI's (or NCCL's) built-in collective, which picks its own algorithm (ring, tree, recursive
doubling) and moves the bytes where this process cannot see them. ``"ring"`` runs the ring
algorithm of :mod:`.ring` in this process, one ``MPI.Sendrecv`` per step with its neighbours,
so every byte that goes to another rank passes through a call that is counted here.

:attr:`Communicator.traffic` keeps per rank and per kind of call:

* ``sent`` / ``received``, measured: the bytes this rank handed to MPI (or NCCL). Under
  ``"ring"`` and for send/recv, the payloads of the point-to-point calls (received: the count
  MPI reports in the status of each ``Sendrecv``), i.e. the bytes that crossed to other ranks.
  Under ``"mpi"``, the sizes of the buffers given to the built-in collective: not the bytes
  on the wire, which MPI does not report.
* ``formula``: what a ring moves for that call by the cost model behind the ZeRO paper's
  traffic formulas (:func:`.ring.ring_bytes`, padding included): all-reduce 2(N-1)/N·n,
  reduce-scatter and all-gather (N-1)/N·n, a broadcast n from every rank but the last of the
  chain, send n. Under ``"ring"`` the measurement must equal it; a test holds them together.

Failure behaviour: MPI collectives block forever when a peer is gone. Every blocking call runs
under a watchdog (``timeout`` seconds, ``$TINYMEM_MPI_TIMEOUT`` or 300): when it expires the
watchdog prints which call on which rank waited too long and calls ``MPI.COMM_WORLD.Abort``,
which makes ``mpiexec`` stop every rank with a non-zero exit. Pair it with
:func:`tinymem.distributed.launch.install_excepthook` so that a rank that *raises* aborts the
job at once instead of leaving its peers to wait for the timeout.

Memory cost: none beyond the caller's buffers, except the host staging copies of the CuPy
fallback (two host copies of each buffer while the call runs), reduce-scatter's contiguous
output on NCCL, and the ring's receive block (1/N of the buffer; all-reduce of a size that N
does not divide also a padded copy).
"""
import os
import threading
import time
import weakref

from .. import backend
from ..checks import is_int, real_number
from . import ring
from .flat import address
from .launch import abort

ALGORITHMS = ("mpi", "ring")
RING_TAG = 32000  # the ring's messages; the pipeline's tags (2m, 2m+1) stay far below


class Traffic:
    """Bytes moved by one rank, per kind of call: ``{kind: {calls, sent, received, formula}}``."""

    FIELDS = ("calls", "sent", "received", "formula")

    def __init__(self):
        self.by_kind = {}

    def add(self, kind, sent, received, formula):
        row = self.by_kind.setdefault(kind, dict.fromkeys(self.FIELDS, 0))
        for field, value in zip(self.FIELDS, (1, sent, received, formula)):
            row[field] += value

    def total(self, field="sent"):
        return sum(row[field] for row in self.by_kind.values())

    def reset(self):
        self.by_kind = {}

    def snapshot(self):
        return {kind: dict(row) for kind, row in self.by_kind.items()}


class _Watchdog:
    """One daemon thread that aborts the job when a blocking call outlives its deadline, until
    :meth:`stop`. It holds the MPI communicator, not the :class:`Communicator`, so that an
    unclosed Communicator can still die and stop it (``weakref.finalize``)."""

    def __init__(self, comm, timeout):
        self.comm, self.timeout = comm, timeout
        self.deadline, self.what = None, None
        self.lock, self._stopped = threading.Lock(), threading.Event()
        self._thread = threading.Thread(target=self._watch, name="tinymem-mpi-watchdog", daemon=True)
        self._thread.start()

    def arm(self, what):
        with self.lock:
            self.deadline, self.what = time.monotonic() + self.timeout, what

    def disarm(self):
        with self.lock:
            self.deadline = None

    def stop(self):
        """Stop the thread and wait for it: at most one check of the deadline, or, when another
        thread is in a blocking call, until that call returns or its deadline aborts the job."""
        self._stopped.set()
        if self._thread is not threading.current_thread():
            self._thread.join()

    def _watch(self):
        interval = min(1.0, self.timeout / 4)
        while True:
            stopping = self._stopped.wait(interval)
            with self.lock:
                # A call in flight (closed from another thread) is still watched: stopping now
                # would leave it to block forever if a rank never comes.
                if stopping and self.deadline is None:
                    return
                expired = self.deadline is not None and time.monotonic() > self.deadline
                what = self.what
            if stopping and not expired:
                time.sleep(interval)  # _stopped.wait no longer waits
            if expired:
                rank = self.comm.Get_rank()
                abort(self.comm,
                      f"tinymem.distributed: rank {rank} waited more than {self.timeout:g} s in "
                      f"{what}; another rank has probably died or is stuck. Aborting every rank "
                      f"(raise TINYMEM_MPI_TIMEOUT if the step is simply slow).\n", 3)


def check_rank(what, rank, size):
    """Refuse a rank MPI would reject with its own error stack (or wait on forever)."""
    if not is_int(rank) or not 0 <= rank < size:
        raise ValueError(f"{what} must be a rank in 0..{size - 1} (the world has {size}), got {rank!r}")


class Communicator:
    """Collectives over ``MPI.COMM_WORLD`` (or ``comm``) with byte accounting and a watchdog.

    ``algorithm``: ``"mpi"`` (default) uses MPI's or NCCL's built-in all-reduce, reduce-scatter
    and all-gather; ``"ring"`` runs :mod:`.ring` over ``MPI.Sendrecv`` (always through MPI:
    CuPy arrays are staged through host memory unless ``cuda_aware``), so that the bytes moved
    are measured. ``transport``: ``"auto"`` uses NCCL for CuPy arrays when ``cupy.cuda.nccl`` is
    available and MPI otherwise; ``"mpi"`` always uses MPI (CuPy arrays are staged through host
    memory unless ``cuda_aware=True`` says the MPI library reads GPU pointers itself).
    """

    def __init__(self, comm=None, timeout=None, transport="auto", cuda_aware=False, algorithm="mpi"):
        # The arguments are checked before mpi4py is imported: the import initialises MPI.
        if algorithm not in ALGORITHMS:
            raise ValueError(f"unknown algorithm {algorithm!r}: choose 'mpi' (MPI's built-in "
                             f"collectives) or 'ring' (the ring over point-to-point sends)")
        if comm is not None and not hasattr(comm, "Get_rank"):
            raise TypeError(f"comm must be an mpi4py communicator (or None for MPI.COMM_WORLD), got {comm!r}")
        if timeout is None:
            timeout = float(os.environ.get("TINYMEM_MPI_TIMEOUT", 300))
        self.timeout = real_number("Communicator: timeout", timeout)
        if not self.timeout > 0:  # <= 0 killed the watchdog thread, or would abort every blocking call
            raise ValueError(f"timeout must be a positive number of seconds, got {self.timeout}")
        from mpi4py import MPI

        self.MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.traffic = Traffic()
        self.transport, self.cuda_aware, self.algorithm = transport, cuda_aware, algorithm
        self._watchdog = _Watchdog(self.comm, self.timeout)
        self._stop_watchdog = weakref.finalize(self, self._watchdog.stop)  # at close() or death
        self._nccl = None

    def close(self):
        """Stop the watchdog's thread (the MPI communicator stays usable by others). Closing
        twice is allowed; a blocking call, or a send, on a closed Communicator raises. Closed from another
        thread during a blocking call, it waits for that call, which the watchdog still aborts
        at its deadline."""
        self._stop_watchdog()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def select_gpu(self):
        """Make this rank use GPU (local rank mod GPUs per node); call it before building the model.

        Returns the device id. Ranks on one node are counted with MPI's shared-memory split, so
        4 ranks on each of 2 nodes with 4 GPUs use GPUs 0-3 on both.
        """
        cupy = backend.get_cupy()
        local = self.comm.Split_type(self.MPI.COMM_TYPE_SHARED)
        device = local.Get_rank() % cupy.cuda.runtime.getDeviceCount()
        local.Free()
        cupy.cuda.Device(device).use()
        return device

    # -- plumbing ---------------------------------------------------------------------------
    def _check_open(self, what):
        if not self._stop_watchdog.alive:  # no watchdog would abort a call that never returns
            raise RuntimeError(f"{what}: this Communicator is closed; make a new one")

    def _blocking(self, what, fn):
        self._check_open(what)
        self._watchdog.arm(f"{what} (rank {self.rank} of {self.size})")
        try:
            return fn()
        finally:
            self._watchdog.disarm()

    def _use_nccl(self, array):
        if backend.device_of(array) != "cuda" or self.transport == "mpi":
            return False
        if self._nccl is None:  # "auto": NCCL where CuPy has it, else MPI through host memory
            from .nccl import NcclBackend, nccl_available
            self._nccl = NcclBackend(self) if nccl_available() else False
        return self._nccl is not False

    def _host(self, array):
        """The buffer MPI reads: the array itself, or a host copy of a CuPy array."""
        if backend.device_of(array) == "cpu" or self.cuda_aware:
            return array
        return backend.to_numpy(array)

    @staticmethod
    def _back(host, array):
        if host is not array:
            array[...] = backend.array_module(array).asarray(host)

    @staticmethod
    def _check_contiguous(what, *arrays):
        for a in arrays:
            if not hasattr(a, "flags"):
                raise TypeError(f"{what}: MPI sends NumPy or CuPy arrays, got a {type(a).__name__}")
            if not a.flags.c_contiguous:
                raise ValueError(f"{what}: MPI needs C-contiguous buffers; got one of shape {a.shape} "
                                 f"with strides {a.strides} (pass xp.ascontiguousarray(...))")

    def _ring(self, what, algorithm):
        """Run one rank's side of a ring algorithm; returns the bytes it (sent, received).

        ``algorithm(exchange)`` is a function of :mod:`.ring`. Each ``exchange`` is one
        ``Sendrecv``: the send buffer's bytes are what this rank handed to MPI, the received
        count is what MPI's status says arrived.
        """
        right, left = (self.rank + 1) % self.size, (self.rank - 1) % self.size
        status, counted = self.MPI.Status(), [0, 0]

        def exchange(send, recv):
            if backend.device_of(send) == "cuda":  # the last add must be done before MPI reads
                backend.get_cupy().cuda.get_current_stream().synchronize()
            self.comm.Sendrecv(send, dest=right, sendtag=RING_TAG, recvbuf=recv, source=left,
                               recvtag=RING_TAG, status=status)
            counted[0] += send.nbytes
            counted[1] += status.Get_count(self.MPI.BYTE)

        self._blocking(f"ring {what}", lambda: algorithm(exchange))
        return counted

    # -- collectives ------------------------------------------------------------------------
    def all_reduce(self, array, op="sum"):
        """Sum (or ``op="max"``) ``array`` over all ranks, in place; returns it."""
        self._check_contiguous("all_reduce", array)
        if op not in ring.OPS:
            raise ValueError(f"all_reduce: unknown op {op!r}; choose one of {', '.join(ring.OPS)}")
        formula = ring.ring_bytes("all_reduce", array.size, array.itemsize, self.size)
        if self.algorithm == "ring":
            host = self._host(array)
            sent, received = self._ring("all_reduce", lambda exchange: ring.all_reduce(
                host.reshape(-1), self.rank, self.size, exchange, op))
            self._back(host, array)
        else:
            sent = received = array.nbytes
            if self._use_nccl(array):
                self._blocking("all_reduce", lambda: self._nccl.all_reduce(array, op))
            else:
                host = self._host(array)
                mpi_op = {"sum": self.MPI.SUM, "max": self.MPI.MAX}[op]
                self._blocking("all_reduce", lambda: self.comm.Allreduce(self.MPI.IN_PLACE, host, op=mpi_op))
                self._back(host, array)
        self.traffic.add("all_reduce", sent, received, formula)
        return array

    def reduce_scatter(self, full, out):
        """``out`` <- block ``rank`` of the sum of ``full`` over ranks (``full.size == N·out.size``).

        ``full`` is scratch: the ring leaves partial sums in it (the built-in calls do not, but
        do not count on it).
        """
        self._check_contiguous("reduce_scatter", full, out)
        if full.size != out.size * self.size:
            raise ValueError(f"reduce_scatter: input of {full.size} elements does not split into "
                             f"{self.size} blocks of {out.size}; pad it to a multiple of the world size")
        formula = ring.ring_bytes("reduce_scatter", full.size, full.itemsize, self.size)
        if self.algorithm == "ring":
            src, dst = self._host(full), self._host(out)
            blocks = src.reshape(self.size, out.size)
            sent, received = self._ring("reduce_scatter", lambda exchange: ring.reduce_scatter(
                blocks, self.rank, exchange))
            dst.reshape(-1)[...] = blocks[self.rank]
            self._back(dst, out)
        elif self._use_nccl(full):
            sent, received = full.nbytes, out.nbytes
            self._blocking("reduce_scatter", lambda: self._nccl.reduce_scatter(full, out))
        else:
            sent, received = full.nbytes, out.nbytes
            src, dst = self._host(full), self._host(out)
            self._blocking("reduce_scatter", lambda: self.comm.Reduce_scatter_block(src, dst, op=self.MPI.SUM))
            self._back(dst, out)
        self.traffic.add("reduce_scatter", sent, received, formula)
        return out

    def all_gather(self, shard, out):
        """``out`` <- the ``shard`` of every rank in rank order (``out.size == N·shard.size``).

        ``shard`` may be this rank's block of ``out`` itself (a view): the call is then in place.
        """
        self._check_contiguous("all_gather", shard, out)
        if out.size != shard.size * self.size:
            raise ValueError(f"all_gather: output of {out.size} elements is not {self.size} x {shard.size}")
        formula = ring.ring_bytes("all_gather", out.size, out.itemsize, self.size)
        if self.algorithm == "mpi" and self._use_nccl(out):
            sent, received = shard.nbytes, out.nbytes
            self._blocking("all_gather", lambda: self._nccl.all_gather(shard, out))
        else:
            dst = self._host(out)
            block = dst.reshape(-1)[self.rank * shard.size:(self.rank + 1) * shard.size]
            if address(block) != address(shard):  # not already in place
                same_place = backend.device_of(block) == backend.device_of(shard)
                block[...] = (shard if same_place else backend.to_numpy(shard)).reshape(-1)
            if self.algorithm == "ring":
                sent, received = self._ring("all_gather", lambda exchange: ring.all_gather(
                    dst.reshape(self.size, shard.size), self.rank, exchange))
            else:
                sent, received = shard.nbytes, out.nbytes
                self._blocking("all_gather", lambda: self.comm.Allgather(self.MPI.IN_PLACE, dst))
            self._back(dst, out)
        self.traffic.add("all_gather", sent, received, formula)
        return out

    def broadcast(self, array, root=0):
        """Copy ``root``'s ``array`` into every rank's ``array`` (in place); returns it."""
        self._check_contiguous("broadcast", array)
        check_rank("broadcast: root", root, self.size)
        if self._use_nccl(array):
            self._blocking("broadcast", lambda: self._nccl.broadcast(array, root))
        else:
            host = self._host(array)
            self._blocking("broadcast", lambda: self.comm.Bcast(host, root=root))
            self._back(host, array)
        n = array.nbytes
        last = (root - 1) % self.size  # a chain root -> root+1 -> ... -> last
        chain = n if self.rank != last and self.size > 1 else 0
        received = n if self.rank != root else 0
        self.traffic.add("broadcast", n if self.rank == root else 0, received, chain)
        return array

    def send(self, array, dest, tag=0):
        """Send ``array`` to rank ``dest`` without blocking; returns a request to :meth:`wait`.

        The array must stay alive and unchanged until the request completes.
        """
        self._check_open("send")  # its request could not be waited for: wait() refuses
        self._check_contiguous("send", array)
        check_rank("send: dest", dest, self.size)
        if self._use_nccl(array):
            request = self._nccl.send(array, dest)
        else:
            host = self._host(array)
            request = _Request(self.comm.Isend(host, dest=dest, tag=tag), host)
        self.traffic.add("send", array.nbytes, 0, array.nbytes)
        return request

    def recv(self, out, source, tag=0):
        """Receive into ``out`` from rank ``source`` (blocking, under the watchdog)."""
        self._check_contiguous("recv", out)
        check_rank("recv: source", source, self.size)
        if self._use_nccl(out):
            self._blocking(f"recv from rank {source}", lambda: self._nccl.recv(out, source))
        else:
            host = self._host(out)
            self._blocking(f"recv from rank {source}", lambda: self.comm.Recv(host, source=source, tag=tag))
            self._back(host, out)
        self.traffic.add("recv", 0, out.nbytes, 0)
        return out

    def wait(self, requests):
        """Complete send requests (under the watchdog)."""
        self._blocking("wait for sends", lambda: [r.wait() for r in requests])

    def barrier(self):
        self._blocking("barrier", self.comm.Barrier)


class _Request:
    """An MPI request plus the buffer it reads, kept alive until the send completes."""

    def __init__(self, request, buffer):
        self.request, self.buffer = request, buffer

    def wait(self):
        self.request.Wait()
        self.buffer = None

