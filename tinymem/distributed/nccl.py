"""The GPU path of the communicator: CuPy arrays through NCCL (``cupy.cuda.nccl``).

MPI sets the job up (ranks, the NCCL unique id broadcast from rank 0); NCCL then moves the
data between GPUs directly, without a trip through host memory. Each rank uses the GPU that is
current when the first collective runs: call ``Communicator.select_gpu()`` before building the
model, so the arrays and the NCCL communicator are on the same GPU. Calls are enqueued on CuPy's current stream and waited for
before returning, so they block like their MPI twins and the watchdog can time them out.

Pitfalls: NCCL refuses two ranks on one GPU (run one rank per GPU); NCCL's point-to-point
``send``/``recv`` need NCCL >= 2.7 and share CuPy's current stream, so a send that no rank
receives yet holds back the receives queued behind it (schedules must pair them in order); the
arrays must be C-contiguous.

Memory cost: none beyond the caller's buffers.
"""
from .. import backend

_DTYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64",
           "int32": "NCCL_INT32", "int64": "NCCL_INT64", "uint8": "NCCL_UINT8", "int8": "NCCL_INT8"}


def nccl_available():
    """Whether this CuPy has NCCL (``cupy.cuda.nccl`` imports)."""
    try:
        from cupy.cuda import nccl  # noqa: F401
    except ImportError:
        return False
    return True


class NcclBackend:
    """NCCL collectives for one :class:`~tinymem.distributed.comm.Communicator`."""

    def __init__(self, communicator):
        cupy = backend.get_cupy()
        try:
            from cupy.cuda import nccl
        except ImportError as exc:
            raise backend.DeviceError(
                "CuPy arrays need NCCL for collectives, and cupy.cuda.nccl is not available: "
                "install NCCL for CuPy, or pass transport='mpi' to stage through host memory") from exc
        self.cupy, self.nccl = cupy, nccl
        uid = nccl.get_unique_id() if communicator.rank == 0 else None
        uid = communicator.comm.bcast(uid, root=0)
        self.comm = nccl.NcclCommunicator(communicator.size, uid, communicator.rank)

    def _dtype(self, array):
        name = array.dtype.name
        if name not in _DTYPES:
            raise TypeError(f"NCCL cannot move {name} arrays; cast to one of {', '.join(_DTYPES)}")
        return getattr(self.nccl, _DTYPES[name])

    def _stream(self):
        return self.cupy.cuda.get_current_stream()

    def _finish(self):
        self._stream().synchronize()

    def all_reduce(self, array, op):
        nccl_op = {"sum": self.nccl.NCCL_SUM, "max": self.nccl.NCCL_MAX}[op]
        self.comm.allReduce(array.data.ptr, array.data.ptr, array.size, self._dtype(array), nccl_op,
                            self._stream().ptr)
        self._finish()

    def reduce_scatter(self, full, out):
        self.comm.reduceScatter(full.data.ptr, out.data.ptr, out.size, self._dtype(full),
                                self.nccl.NCCL_SUM, self._stream().ptr)
        self._finish()

    def all_gather(self, shard, out):
        # NCCL's all-gather is in place when the send buffer is this rank's block of out.
        self.comm.allGather(shard.data.ptr, out.data.ptr, shard.size, self._dtype(out), self._stream().ptr)
        self._finish()

    def broadcast(self, array, root):
        self.comm.broadcast(array.data.ptr, array.data.ptr, array.size, self._dtype(array), root,
                            self._stream().ptr)
        self._finish()

    def send(self, array, dest):
        self.comm.send(array.data.ptr, array.size, self._dtype(array), dest, self._stream().ptr)
        return _Done()

    def recv(self, out, source):
        self.comm.recv(out.data.ptr, out.size, self._dtype(out), source, self._stream().ptr)
        self._finish()


class _Done:
    """NCCL sends complete with the stream; waiting is synchronising it."""

    def wait(self):
        backend.get_cupy().cuda.get_current_stream().synchronize()
