"""Optimizer-state offload: the state lives on the host or on disk and the update runs there.

``opt = offload_optimizer(tm.optim.Adam(model.parameters()), place="host")`` is ZeRO-Offload's
idea (Ren et al. 2021) on any tinymem optimizer: for each parameter, the gradient goes down to
the host, the optimizer's own ``update_parameter`` runs there on a host *master* copy of the parameter and
on host state, and the updated parameter comes back up. With ``place="disk"`` the state waits in
files between steps and a background thread reads the next parameter's state while the current
one updates (``prefetch`` parameters ahead).

It works through the optimizer's state storage: it sets ``update_place = "host"`` so that
``Optimizer.state_array`` (and ``scratch``) create and count the state on the host, and it
calls ``update_parameter`` with host arrays. Any optimizer that keeps its state in ``state_array`` arrays and does its work
in ``update_parameter`` can be wrapped; nothing in its file changes.

Memory: no optimizer bytes on the device (Adam: ``8·N`` bytes for N float32 parameters move to
the host or disk); the host also keeps a ``4·N``-byte master of each device parameter (none for
parameters that already live on the host, as with :func:`~.offload_stream.stream_layers`).
Traffic per step: each gradient down and each parameter up (``nbytes`` each), plus, on disk, the
state read and written once.

Pitfalls: the CPU update can dominate the step (ZeRO-Offload overlaps it with the next
backward; we do not); if you assign a new array to ``p.data`` the master follows it, but an
in-place edit of a device parameter outside ``step()`` is overwritten by the master at the next
step.
"""
import numpy as np

from ... import backend, memory
from ...autograd import Tensor
from ...optim.optimizer import OptimizerWrapper
from ...sparse import RowSparse
from .prefetch import Worker
from .store import DiskStore, _File, _Pending


class OffloadedOptimizer(OptimizerWrapper):
    """Wraps an optimizer so that its state and its update live on the host or on disk."""

    def __init__(self, optimizer, place="host", directory=None, prefetch=1):
        if place not in ("host", "disk"):
            raise ValueError(f"offload_optimizer: place must be 'host' or 'disk', got {place!r}")
        if prefetch < 0:
            raise ValueError(f"offload_optimizer: prefetch must be >= 0, got {prefetch}")
        if not hasattr(optimizer, "param_groups"):
            raise TypeError(f"offload_optimizer wraps a tinymem optimizer (e.g. optim.Adam(model.parameters())), "
                            f"got {type(optimizer).__name__}")
        if not hasattr(optimizer, "update_parameter"):  # a MasterOptimizer would never see its grads
            raise TypeError(f"offload_optimizer wraps the optimizer itself, got a {type(optimizer).__name__}; "
                            "with half precision, offload first: half(model, offload_optimizer(opt))")
        super().__init__(optimizer)
        self.place, self.depth = place, prefetch
        optimizer.update_place = "host"
        self.files = (DiskStore(directory, "optimizer", "optimizer", "host", prefix="tinymem-optstate-")
                      if place == "disk" else None)
        self._worker = Worker() if self.files is not None and prefetch else None
        self._masters = {}
        self.bytes_grad_down = self.bytes_param_up = self.bytes_master = 0
        for p in list(optimizer.state):
            optimizer.state[p] = self._store(self._rehome(optimizer.state[p], "host"))

    # -- the PyTorch surface (param_groups and state come from OptimizerWrapper) -----------------
    def zero_grad(self, set_to_none=True):
        self.optimizer.zero_grad(set_to_none)

    def state_bytes(self):
        return self.optimizer.state_bytes()

    def stats(self):
        moved = {"bytes_grad_down": self.bytes_grad_down, "bytes_param_up": self.bytes_param_up,
                 "bytes_master": self.bytes_master}
        if self.files is not None:
            moved.update(bytes_state_out=self.files.moved_out, bytes_state_in=self.files.moved_in)
        return moved

    def step(self):
        memory.mark("optimizer")
        work = [(p, g) for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
        ahead = {}
        for k, (p, group) in enumerate(work):
            for j in range(k + 1, min(k + 1 + self.depth, len(work))):
                if self._worker is not None and j not in ahead:
                    ahead[j] = self._begin(work[j][0], self._worker)
            state = self._finish(ahead.pop(k, None) or self._begin(p, None))
            master = self._master(p)
            grad = self._down(p.grad.data)
            self.optimizer.update_parameter(Tensor.wrap(master, bucket="parameter"), grad, state, group)
            del grad
            self.optimizer.state[p] = self._store(state)
            self._up(p, master)

    # -- moving things ---------------------------------------------------------------------------
    def _begin(self, p, worker):
        state = self.optimizer.state.get(p)
        if state is None:
            return {}  # kept by step() only once the update succeeded (all-or-nothing)
        return {k: self.files.begin_load(v, worker) if isinstance(v, _File) else v for k, v in state.items()}

    def _finish(self, state):
        return {k: self.files.finish_load(v) if isinstance(v, _Pending) else v for k, v in state.items()}

    def _store(self, state):
        if self.files is None:
            return state
        return {k: self.files.put(v) if _is_array(v) else v for k, v in state.items()}

    def _rehome(self, state, place, device="cpu"):
        """Copy a state dict's arrays to ``place`` ("host", or "device" on ``device``)."""
        state = self._finish({k: self.files.begin_load(v) if isinstance(v, _File) else v
                              for k, v in state.items()}) if self.files is not None else state
        out = {}
        for k, v in state.items():
            if _is_array(v):
                v = backend.to_numpy(v).copy() if place == "host" else backend.to_device(np.array(v), device)
                v = memory.register(v, "optimizer", place)
            out[k] = v
        return out

    def _master(self, p):
        located = memory.locate(p.data)
        if located is not None and located[1] != "device":
            return p.data  # already on the host (a streamed layer): update it in place
        key = id(p)
        entry = self._masters.get(key)
        if entry is None or entry[0] is not memory.owner_of(p.data):
            host = np.array(backend.to_numpy(p.data), copy=True)
            memory.register(host, "parameter", "host")
            self.bytes_master += host.nbytes
            entry = self._masters[key] = (memory.owner_of(p.data), host)
        return entry[1]

    def _down(self, grad):
        if getattr(grad, "is_sparse", False):  # a row-sparse gradient goes down as its two arrays
            return RowSparse(self._down(grad.indices), self._down(grad.values), grad.shape)
        located = memory.locate(grad)
        if located is not None and located[1] != "device":
            return grad
        host = np.array(grad, copy=True) if backend.device_of(grad) == "cpu" else backend.to_numpy(grad)
        self.bytes_grad_down += host.nbytes
        return memory.register(host, "gradient", "host")

    def _up(self, p, master):
        if master is p.data:
            return
        if backend.device_of(p.data) == "cpu":
            p.data[...] = master
        else:
            p.data.set(master)
        self.bytes_param_up += master.nbytes

    # -- state in and out ------------------------------------------------------------------------
    def state_dict(self):
        """The wrapped optimizer's ``state_dict()``, with disk state read back first."""
        saved = self.optimizer.state
        self.optimizer.state = {p: self._rehome(s, "host") for p, s in saved.items()}
        try:
            return self.optimizer.state_dict()
        finally:
            self.optimizer.state = saved

    def load_state_dict(self, state_dict):
        self.optimizer.load_state_dict(state_dict)
        for p in list(self.optimizer.state):
            self.optimizer.state[p] = self._store(self._rehome(self.optimizer.state[p], "host"))

    def close(self):
        """Bring the state back to the parameters' device, drop the masters, remove the files."""
        for p in list(self.optimizer.state):
            self.optimizer.state[p] = self._rehome(self.optimizer.state[p], "device", p.device)
        self.optimizer.__dict__.pop("update_place", None)
        self._masters.clear()
        if self._worker is not None:
            self._worker.shutdown()
        if self.files is not None:
            self.files.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _is_array(value):
    return hasattr(value, "nbytes") and hasattr(value, "shape") and not isinstance(value, _File)


def offload_optimizer(optimizer, place="host", directory=None, prefetch=1):
    """Wrap ``optimizer`` so its state lives at ``place`` ("host" or "disk") and its update runs
    there; see :class:`OffloadedOptimizer`. Use it as a context manager to clean up."""
    return OffloadedOptimizer(optimizer, place, directory, prefetch)
