"""Layer streaming: weights live on the host or on disk and visit the device one layer at a time.

``with stream_layers(model, place="host") as streamed: loss = f(streamed(x)); loss.backward()``

Forward: before layer ``i`` runs, its parameters are copied to the device (prefetched on a
background thread while layer ``i-1`` computed), the layer runs on those copies, and the copies
are dropped when it returns. Backward needs the weights again: the layer's ops saved the device
copy of a weight, and a pack hook replaces it by a small reference (:class:`_WeightRef`), so the
device copy dies after forward and the unpack hook fetches the weight once more, prefetching the
previous layer's. The gradient of each weight is sent down to the host (into ``p.grad``, where
ZeRO-Offload keeps it) by :class:`_Fetch`'s backward.

Memory on the device: the parameters of the layer running plus ``prefetch`` layers ahead, i.e.
about two layers' worth with ``prefetch=1`` (``max(bytes_i + bytes_{i+1})``), plus each weight's
gradient while it is computed. Traffic per step: every parameter once in forward, every *saved*
weight once more in backward, every gradient once down (``stats()`` counts them).

``place="host"`` keeps each parameter in a host array (pinned on CuPy); ``place="disk"`` in a
``np.memmap`` file, so the optimizer updates it in place and the OS pages it in and out.

Pitfalls: leaving the ``with`` block copies the parameters back to the device (their Parameter
objects stay the same, so an optimizer built on them keeps working); use
:func:`~.offload_optim.offload_optimizer` so optimizer state is created and counted on the host
too; an op that saves something *computed* from a weight (a cast copy) keeps that on the device.
"""
import os

import numpy as np

from ... import backend, memory
from ...autograd import Function, Tensor, current_saved_tensors_hooks, saved_tensors_hooks
from ...nn import Module
from .prefetch import Prefetcher
from .copies import pinned_empty
from .store import DiskStore, HostStore


class _WeightRef:
    """Saved in place of a streamed weight's device copy: where to fetch it again."""

    __slots__ = ("param", "device", "index", "__weakref__")

    def __init__(self, param, device):
        self.param, self.device, self.index = param, device, -1

    @property
    def host(self):
        return self.param.data

    @property
    def shape(self):
        return self.param.shape

    @property
    def dtype(self):
        return self.param.dtype


class _Fetch(Function):
    """Identity from a resident parameter to its device copy; its backward sends the gradient
    down into the parameter's host ``.grad`` (so the engine gets nothing back to accumulate)."""

    def forward(ctx, source, device_array=None, streamer=None, param=None):
        ctx.streamer, ctx.param = streamer, param
        return device_array

    def backward(ctx, g):
        ctx.streamer._gradient_down(ctx.param, g)
        return None


def _named_params(layer):
    """(owning module, attribute name, Parameter) for every parameter of ``layer``."""
    found, seen = [], set()
    for _, module in layer.named_modules():
        for name, p in module.named_parameters(recurse=False):
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                found.append((module, name, p))
    return found


class StreamedLayers(Module):
    """A sequence of layers whose parameters stay on the host or disk (see the module docstring)."""

    def __init__(self, layers, place="host", directory=None, prefetch=1):
        super().__init__()
        if place not in ("host", "disk"):
            raise ValueError(f"stream_layers: place must be 'host' or 'disk', got {place!r}")
        if prefetch < 0:
            raise ValueError(f"stream_layers: prefetch must be >= 0, got {prefetch}")
        for i, layer in enumerate(layers):
            setattr(self, str(i), layer)
        object.__setattr__(self, "_layer_params", [_named_params(m) for m in self.children()])
        params = [p for entries in self._layer_params for _, _, p in entries]
        if not params:
            raise ValueError("stream_layers: the layers have no parameters to stream")
        self.place, self.depth = place, prefetch
        self.device = params[0].device
        self.bytes_forward = self.bytes_backward = self.bytes_grad_down = 0
        self._loader = HostStore("parameter", "parameter", pin_memory=True)
        self._prefetcher = Prefetcher(self._loader, prefetch)
        self._files = DiskStore(directory, "parameter", prefix="tinymem-weights-") if place == "disk" else None
        self._ahead = {}
        self._closed = False
        for p in params:
            self._move_out(p)

    # -- where the parameters live ----------------------------------------------------------
    def _move_out(self, p):
        values = backend.to_numpy(p.data)
        if self._files is not None:
            path = os.path.join(self._files.directory, f"param{id(p):x}.bin")
            resident = np.memmap(path, dtype=values.dtype, mode="w+", shape=values.shape)
        elif self.device == "cuda":
            resident = pinned_empty(values.shape, values.dtype)
        else:
            resident = np.empty(values.shape, values.dtype)
        resident[...] = values
        memory.register(resident, "parameter", self.place)
        p.data = resident
        p.grad = None

    def close(self):
        """Copy every parameter (and gradient) back to the device and remove the files."""
        if self._closed:
            return
        self._closed = True
        self._prefetcher.close()
        self._ahead.clear()
        for entries in self._layer_params:
            for _, _, p in entries:
                p.data = backend.to_device(np.array(p.data), self.device)
                if p.grad is not None:
                    p.grad = Tensor.wrap(backend.to_device(np.array(p.grad.data), self.device))
        if self._files is not None:
            self._files.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def stats(self):
        return {"bytes_forward": self.bytes_forward, "bytes_backward": self.bytes_backward,
                "bytes_grad_down": self.bytes_grad_down, "prefetch_hits": self._prefetcher.hits,
                "prefetch_misses": self._prefetcher.misses}

    # -- forward ----------------------------------------------------------------------------
    def forward(self, x):
        if self._closed:
            raise RuntimeError("stream_layers: this stream was closed; run the model itself now")
        for i, layer in enumerate(self.children()):
            x = self._run(i, layer, x)
        return x

    def _begin(self, i, worker):
        return [self._loader.begin_load(_WeightRef(p, self.device), worker) for _, _, p in self._layer_params[i]]

    def _run(self, i, layer, x):
        entries = self._layer_params[i]
        if not entries:
            return layer(x)
        loads = self._ahead.pop(i, None) or self._begin(i, None)
        ahead = [j for j in range(i + 1, len(self._layer_params)) if self._layer_params[j]][:self.depth]
        for j in ahead:
            if j not in self._ahead:
                self._ahead[j] = self._begin(j, self._prefetcher.worker)
        fetched = {}
        for (module, name, p), pending in zip(entries, loads):
            array = self._loader.finish_load(pending)
            self.bytes_forward += array.nbytes
            fetched[id(array)] = p
            object.__setattr__(module, name, _Fetch.apply(p, device_array=array, streamer=self, param=p))
        del loads
        pack, unpack = self._hooks(fetched, current_saved_tensors_hooks())
        try:
            with saved_tensors_hooks(pack, unpack):
                return layer(x)
        finally:
            for module, name, p in entries:
                object.__setattr__(module, name, p)

    def _hooks(self, fetched, outer):
        def pack(t):
            p = fetched.get(id(memory.owner_of(t.data)))
            if p is not None:
                return self._prefetcher.track(_WeightRef(p, self.device))
            return outer[0](t) if outer else t

        def unpack(packed):
            if isinstance(packed, _WeightRef):
                array = self._prefetcher.get(packed)
                self.bytes_backward += array.nbytes
                return array
            return outer[1](packed) if outer else packed
        return pack, unpack

    # -- backward ---------------------------------------------------------------------------
    def _gradient_down(self, p, g):
        # A real device-to-host copy (on NumPy too: the gradient array is the device's).
        host = np.array(g, copy=True) if backend.device_of(g) == "cpu" else backend.to_numpy(g)
        memory.register(host, "gradient", "host")
        self.bytes_grad_down += host.nbytes
        if p.grad is None:
            p.grad = Tensor.wrap(host, bucket="gradient")
        else:
            p.grad.data += host


def stream_layers(model, place="host", directory=None, prefetch=1):
    """Stream the children of ``model`` (a Sequential or a list of modules) from ``place``.

    Returns a :class:`StreamedLayers` module; use it as a context manager so that the
    parameters come back to the device and the files go away at the end.
    """
    layers = list(model) if hasattr(model, "__iter__") else [model]
    return StreamedLayers(layers, place, directory, prefetch)
