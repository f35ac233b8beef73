"""One module's parameters laid end to end in one flat buffer, cut into N equal shards.

ZeRO shards a *flat* buffer, not the parameters one by one: a unit (one layer of a Sequential)
of P elements is padded to N·ceil(P/N) elements and rank r owns elements
[r·s, (r+1)·s) with s = ceil(P/N). The shard of rank r may span several parameters (or none);
the optimizer does not care, because Adam and SGD are elementwise.

    full  |---- weight (out x in) ----|-- bias --|pad|
    shard |   rank 0   |   rank 1   |   rank 2   |   rank 3   |

Padding costs at most N-1 elements per unit on the rank holding the last block; every other
byte of state is split exactly N ways.

Parameters keep their identity (the graph and the optimizer hold them); :meth:`FlatUnit.bind`
points each one's ``data`` at its slice of a full buffer, :meth:`FlatUnit.unbind` at an empty
placeholder, so the full buffer's bytes live exactly as long as someone needs them.

Memory cost: ``flatten_params`` and ``flatten_grads`` each make one padded copy of the unit:
4·N·ceil(P/N) bytes in float32.
"""
from .. import backend, memory


class FlatUnit:
    """The parameters of ``module`` as one padded flat buffer sharded over ``world_size`` ranks."""

    def __init__(self, module, world_size, rank):
        self.params = module.parameters()
        self.shapes = [p.shape for p in self.params]
        self.sizes = [p.size for p in self.params]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.numel = sum(self.sizes)
        self.world_size, self.rank = world_size, rank
        self.shard_size = -(-self.numel // world_size)
        self.padded = self.shard_size * world_size
        self.lo, self.hi = rank * self.shard_size, (rank + 1) * self.shard_size
        if self.params:
            first = self.params[0]
            self.dtype, self.device = first.dtype, first.device
            if any(p.dtype != self.dtype or p.device != self.device for p in self.params):
                raise TypeError("a flat unit needs all its parameters in one dtype on one device; "
                                "cast the module first (module.to(dtype=...))")

    def __bool__(self):
        return self.numel > 0

    def _xp(self):
        return backend.array_module(self.device)

    def empty(self, bucket):
        """A new padded buffer of the unit's size, zero-filled, counted in ``bucket``."""
        return memory.register(self._xp().zeros(self.padded, self.dtype), bucket)

    def flatten_params(self):
        """A padded copy of the parameters' values (counted as ``parameter``)."""
        flat = self.empty("parameter")
        for p, off, n in zip(self.params, self.offsets, self.sizes):
            flat[off:off + n] = p.data.reshape(-1)
        return flat

    def flatten_grads(self):
        """A padded copy of the parameters' gradients, zeros where a gradient is missing."""
        flat = self.empty("gradient")
        for p, off, n in zip(self.params, self.offsets, self.sizes):
            if p.grad is not None:
                flat[off:off + n] = p.grad.data.reshape(-1)
        return flat

    def missing_in_shard(self):
        """``(start, stop)`` ranges of this rank's shard whose parameters have no gradient now
        (frozen, or unused this step), in shard coordinates."""
        ranges = []
        for p, off, n in zip(self.params, self.offsets, self.sizes):
            start, stop = max(off, self.lo), min(off + n, self.hi)
            if p.grad is None and start < stop:
                ranges.append((start - self.lo, stop - self.lo))
        return ranges

    def bind(self, flat):
        """Point every parameter's ``data`` at its slice of ``flat`` (views, no copy)."""
        for p, shape, off, n in zip(self.params, self.shapes, self.offsets, self.sizes):
            p.data = flat[off:off + n].reshape(shape)

    def unbind(self):
        """Point every parameter at an empty placeholder, so the full buffer can be freed."""
        for p in self.params:
            p.data = self._xp().empty((0,), self.dtype)

    def drop_grads(self):
        for p in self.params:
            p.grad = None

    def shard_of(self, flat):
        """This rank's block of a padded buffer (a view)."""
        return flat[self.lo:self.hi]


def address(array):
    """Address of an array's first element (NumPy or CuPy): tells whether two views coincide."""
    if backend.device_of(array) == "cpu":
        return array.__array_interface__["data"][0]
    return array.__cuda_array_interface__["data"][0]  # CuPy's array.data.ptr, by the protocol
