"""Pipeline parallelism: the model's layers cut into S stages, one per rank, fed micro-batches.

Rank s holds only the units of stage s (about 1/S of the parameters, gradients and optimizer
state). A batch of B is split into M micro-batches of B/M; each micro-batch's activation goes
forward from stage to stage (a send of micro-batch x width bytes per boundary), and its
gradient comes back the same way. The loss of micro-batch m is scaled by 1/M, so the summed
gradients equal the full batch's: the result equals the unsplit model.

Schedules (Huang et al. 2019 for GPipe; Narayanan et al. 2019 for 1F1B):

* ``"gpipe"``: all M forwards, then all M backwards. Stage s holds the activations of all M
  micro-batches at its peak: activation memory as the whole batch's, split over the stages.
* ``"1f1b"``: stage s runs S-s-1 warm-up forwards, then alternates one forward and one
  backward. At most S-s micro-batches are in flight on stage s, so its activation peak is
  min(S-s, M)/M of GPipe's, for the same bubble.

Bubble: with S stages and M micro-batches of equal cost, each stage idles for S-1 slots out of
M+S-1: a fraction (S-1)/(M+S-1) of the step (:func:`bubble_fraction`). More micro-batches
shrink the bubble; under GPipe they also cost nothing more in activations (the batch is the
same), under 1F1B they lower the activation peak further.

Traffic per step: each boundary carries M activations forward and M gradients back,
2·B·width·b bytes in total, plus a 64-byte shape header per micro-batch.

Pitfalls: B must split into M equal micro-batches; every rank builds the same model (same
seed) and the pipeline empties the parameters of the other stages on each rank; sends are
non-blocking, so their arrays stay alive until the step ends.
"""

import numpy as np

from .. import backend, memory
from ..autograd import Tensor
from ..checks import positive_int
from .units import batch_array, batch_on, model_device, split_units, unit_input

_HEADER = 8  # int64 slots: dtype, ndim, then up to 6 dims
_DTYPES = ("float16", "float32", "float64")


def bubble_fraction(stages, micro_batches):
    """The idle fraction of a GPipe or 1F1B step: (S-1)/(M+S-1)."""
    positive_int("bubble_fraction: stages", stages)
    positive_int("bubble_fraction: micro_batches", micro_batches)
    return (stages - 1) / (micro_batches + stages - 1)


def schedule_order(schedule, stage, stages, micro_batches):
    """What stage ``stage`` runs, in order: a list of ("F", m) forwards and ("B", m) backwards."""
    if schedule == "gpipe":
        return [("F", m) for m in range(micro_batches)] + [("B", m) for m in range(micro_batches)]
    warmup = min(stages - stage - 1, micro_batches)
    order = [("F", m) for m in range(warmup)]
    for k in range(micro_batches - warmup):
        order += [("F", warmup + k), ("B", k)]
    return order + [("B", k) for k in range(micro_batches - warmup, micro_batches)]


def partition(sizes, stages):
    """Contiguous stages minimising the largest stage's parameter count; returns each stage's first unit.

    ``sizes`` are the units' parameter counts. Each stage gets at least one unit. (The classic
    linear-partition dynamic programme: best[k][i] is the smallest possible largest stage when
    the first i units go to k stages.)
    """
    n = len(sizes)
    if stages > n:
        raise ValueError(f"cannot cut {n} units into {stages} stages; use fewer ranks")
    prefix = [0]
    for size in sizes:
        prefix.append(prefix[-1] + size)
    inf = float("inf")
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    cut = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0
    for k in range(1, stages + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                cost = max(best[k - 1][j], prefix[i] - prefix[j])
                if cost < best[k][i]:
                    best[k][i], cut[k][i] = cost, j
    starts, i = [], n
    for k in range(stages, 0, -1):
        i = cut[k][i]
        starts.append(i)
    return starts[::-1]


class Pipeline:
    """``Pipeline(model, make_optimizer, comm, micro_batches=4, schedule="gpipe"|"1f1b")``.

    ``step(x, y, loss_fn)`` takes the global batch on every rank (stage 0 reads ``x``, the last
    stage ``y``) and returns the mean loss on the last stage (``None`` elsewhere).
    """

    def __init__(self, model, optimizer, comm, micro_batches=4, schedule="gpipe"):
        if schedule not in ("gpipe", "1f1b"):
            raise ValueError(f"unknown schedule {schedule!r}; choose 'gpipe' or '1f1b'")
        positive_int("micro_batches", micro_batches)
        self.comm, self.micro_batches, self.schedule = comm, micro_batches, schedule
        units = split_units(model)
        self.device = model_device(units)
        starts = partition([u.num_parameters() for u in units], comm.size) + [len(units)]
        self.stage, self.stages = comm.rank, comm.size
        self.first, self.last = starts[self.stage], starts[self.stage + 1]
        for j, unit in enumerate(units):
            if not self.first <= j < self.last:
                for p in unit.parameters():  # another rank's stage: free it here
                    p.data = backend.array_module(p.data).empty((0,), p.dtype)
        self.units = units[self.first:self.last]
        params = [p for u in self.units for p in u.parameters()]
        self.optimizer = optimizer(params) if params else None
        self.state_at_backward_end = None

    def _run_units(self, h):
        for unit in self.units:
            h = unit(h)
        return h

    def _forward(self, m, xs, ys, loss_fn, inflight, sends):
        if self.stage == 0:
            inp, box = Tensor.wrap(xs[m]), []
        else:
            header = np.zeros(_HEADER, np.int64)
            self.comm.recv(header, self.stage - 1, tag=2 * m)
            shape = tuple(int(d) for d in header[2:2 + header[1]])
            xp = backend.array_module(xs[m])
            buf = memory.register(xp.empty(shape, _DTYPES[header[0]]), "workspace")
            self.comm.recv(buf, self.stage - 1, tag=2 * m + 1)
            box = []
            inp = unit_input(buf, box)
        out = self._run_units(inp)
        if self.stage == self.stages - 1:
            out = loss_fn(out, ys[m]) * (1.0 / self.micro_batches)
        else:
            header = np.zeros(_HEADER, np.int64)
            header[0], header[1], header[2:2 + out.ndim] = _DTYPES.index(out.dtype.name), out.ndim, out.shape
            sends.append(self.comm.send(header, self.stage + 1, tag=2 * m))
            sends.append(self.comm.send(out.data, self.stage + 1, tag=2 * m + 1))
        inflight[m] = (out, box)

    def _backward(self, m, inflight, sends):
        out, box = inflight.pop(m)
        if self.stage == self.stages - 1:
            self.losses.append(float(out.item()))
            out.backward()
        else:
            grad = memory.register(backend.array_module(out.data).empty(out.shape, out.dtype), "workspace")
            self.comm.recv(grad, self.stage + 1, tag=2 * m)
            out.backward(grad)
        if self.stage > 0:
            sends.append(self.comm.send(box[0], self.stage - 1, tag=2 * m))

    def step(self, x, y, loss_fn):
        """One training step over the global batch ``(x, y)``."""
        if self.optimizer is not None:
            self.optimizer.zero_grad()
        x, y = batch_on(x, self.device), batch_on(y, self.device)
        xs, ys = _split(x, self.micro_batches), _split(y, self.micro_batches)
        inflight, sends, self.losses = {}, [], []
        memory.mark("forward")
        for kind, m in schedule_order(self.schedule, self.stage, self.stages, self.micro_batches):
            if kind == "F":
                self._forward(m, xs, ys, loss_fn, inflight, sends)
            else:
                self._backward(m, inflight, sends)
        self.state_at_backward_end = memory.LEDGER.by_bucket()
        self.comm.wait(sends)
        if self.optimizer is not None:
            self.optimizer.step()
        return sum(self.losses) if self.stage == self.stages - 1 else None


def _split(array, parts):
    data = batch_array(array)
    if data.shape[0] % parts:
        raise ValueError(f"a batch of {data.shape[0]} does not split into {parts} equal micro-batches")
    size = data.shape[0] // parts
    return [data[i * size:(i + 1) * size] for i in range(parts)]
