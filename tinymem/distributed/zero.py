"""ZeRO (Rajbhandari et al., 2020): data parallel with the model state sharded across ranks.

Data parallel keeps N identical copies of the 16 bytes per parameter of Adam training. ZeRO
keeps one: each rank owns 1/N of every unit's flat buffer (:mod:`.flat`) and only the state of
that shard.

    stage 1  optimizer state sharded    per rank  4P + 4P + 8P/N   (float32 Adam)
    stage 2  ... and gradients          per rank  4P + 12P/N
    stage 3  ... and parameters         per rank  16P/N
(the paper's mixed-precision Adam has 2 + 2 + 12 bytes: 4P + 12P/N, 2P + 14P/N, 16P/N.)

One step, per unit u of the Sequential (``forward_backward`` runs them one by one):

* stage 3 gathers u's parameters (all-gather) just before u's forward and frees them right
  after; the tensors u saved for backward refer to its parameters through a saved-tensor hook
  that stores *where* in the flat buffer they were, not the bytes, so freeing really frees;
  before u's backward the parameters are gathered again and the hook reads them from there.
* stage 2 and 3 reduce-scatter u's gradients as soon as u's backward is done (each rank keeps
  the sum of its shard, divided by N) and free the full gradients;
  stage 1 keeps every full gradient until the end of backward, then reduce-scatters.
* the optimizer (any elementwise tinymem optimizer: Adam, SGD) steps on the shard only;
  stages 1 and 2 then all-gather the updated shards back into every rank's full parameters.

Traffic per step and rank (ring, P parameters of b bytes): stages 1 and 2 send
(N-1)/N·bP in the reduce-scatter and as much in the all-gather, 2(N-1)/N·bP, the same as data
parallel's all-reduce; stage 3 gathers the parameters twice (forward and backward) and
reduce-scatters once: 3(N-1)/N·bP, 1.5 times data parallel.

The trained parameters equal data parallel's (same gradients, same elementwise updates) up to
the order of the floating-point sums inside the collectives.

Transient memory on top of the shares: one unit's full gradient and its padded flat copy
while it is reduced (stages 2, 3), and one unit's gathered parameters (stage 3). Pitfall:
sharding is per unit, so one huge layer dominates the transient peak; split it.
"""
from .. import backend, memory
from ..autograd import saved_tensors_hooks
from ..nn import Parameter
from .data_parallel import DataParallel, broadcast_parameters
from .flat import FlatUnit, address
from .units import split_units


class _ParamRef:
    """What a stage-3 saved-tensor hook keeps instead of a parameter: where it sits in the unit."""

    __slots__ = ("unit", "offset", "shape", "strides")

    def __init__(self, unit, offset, shape, strides):
        self.unit, self.offset, self.shape, self.strides = unit, offset, shape, strides


class ZeRO(DataParallel):
    """``ZeRO(model, lambda params: Adam(params, lr=1e-3), comm, stage=1|2|3)``; ``step(x, y, loss_fn)``.

    ``model`` must be a Sequential in one floating dtype; ``optimizer`` builds an elementwise
    optimizer over a list of flat shard Parameters (one per unit with parameters).
    """

    def __init__(self, model, optimizer, comm, stage):
        if stage not in (1, 2, 3):
            raise ValueError(f"ZeRO stage must be 1, 2 or 3, got {stage!r}")
        self.model, self.comm, self.stage = model, comm, stage
        self.units = split_units(model)
        broadcast_parameters(model.parameters(), comm)
        self.flats = [FlatUnit(u, comm.size, comm.rank) for u in self.units]
        self.full = {}       # unit -> full parameter buffer (always for stages 1-2, while gathered for 3)
        self.shards = {}     # unit -> Parameter over this rank's shard
        for i, flat in enumerate(self.flats):
            if not flat:
                continue
            full = flat.flatten_params()
            if stage == 3:
                self.shards[i] = Parameter(flat.shard_of(full).copy())
                flat.unbind()
            else:
                flat.bind(full)
                self.full[i] = full
                self.shards[i] = Parameter(flat.shard_of(full))
            del full
        self.optimizer = optimizer(list(self.shards.values()))
        self.state_at_backward_end = None
        self.skipped = {}    # unit -> shard ranges of parameters that had no gradient this step
        self._kept = []      # (array, start, stop, its values there before the optimizer step)
        self._fresh = []     # (shard, ranges) whose optimizer state this step creates

    # -- stage 3: gather when needed, free after ---------------------------------------------
    def _gather(self, i):
        flat = self.flats[i]
        if self.stage != 3 or not flat or i in self.full:
            return
        full = flat.empty("parameter")
        self.comm.all_gather(self.shards[i].data, full)
        flat.bind(full)
        self.full[i] = full

    def _free(self, i):
        if self.stage == 3 and i in self.full:
            self.flats[i].unbind()
            del self.full[i]

    def before_forward(self, i):
        self._gather(i)

    def after_forward(self, i):
        self._free(i)

    def before_backward(self, i):
        self._gather(i)

    def saving(self, i):
        if self.stage != 3 or not self.flats[i]:
            return super().saving(i)
        return saved_tensors_hooks(lambda t: self._pack(i, t), self._unpack)

    def _pack(self, i, tensor):
        full = self.full.get(i)
        array = tensor.data
        if full is None or memory.owner_of(array) is not full:
            return tensor
        offset = (address(array) - address(full)) // full.itemsize
        return _ParamRef(i, offset, array.shape, array.strides)

    def _unpack(self, packed):
        if not isinstance(packed, _ParamRef):
            return packed
        full = self.full.get(packed.unit)
        if full is None:
            raise RuntimeError(f"ZeRO-3: unit {packed.unit}'s parameters are needed in backward but "
                               "are not gathered; run backward through ZeRO.step, unit by unit")
        tricks = backend.array_module(full).lib.stride_tricks
        return tricks.as_strided(full[packed.offset:], packed.shape, packed.strides)

    # -- gradients ---------------------------------------------------------------------------
    def _reduce(self, i):
        """Reduce-scatter unit ``i``'s gradients into its shard's ``.grad`` (the mean over ranks)."""
        flat = self.flats[i]
        if not flat:
            return
        full_grad = flat.flatten_grads()
        self.skipped[i] = flat.missing_in_shard()
        flat.drop_grads()
        shard_grad = memory.register(flat._xp().empty(flat.shard_size, flat.dtype), "gradient")
        self.comm.reduce_scatter(full_grad, shard_grad)
        del full_grad
        shard_grad /= self.comm.size
        self.shards[i].grad = shard_grad

    def after_backward(self, i):
        if self.stage >= 2:
            self._reduce(i)
        self._free(i)

    # -- the step (DataParallel.step calls these) ----------------------------------------------
    def reduce_gradients(self):
        if self.stage == 1:
            for i in range(len(self.units)):
                self._reduce(i)
        self._keep_skipped()

    def _keep_skipped(self):
        """Copy the shard elements (and their per-element optimizer state) of parameters that had
        no gradient: the optimizer steps a whole shard, and would decay or move them by momentum
        where a plain optimizer skips the parameter. Restored after the step. Pitfall: a scalar
        state (Adam's step count) is one per shard, so a parameter that skips some steps gets the
        shard's bias correction, not its own."""
        self._kept, self._fresh = [], []
        for i, ranges in self.skipped.items():
            shard = self.shards[i]
            if shard not in self.optimizer.state:  # made by this step: zeroed there after it
                self._fresh.append((shard, ranges))
            arrays = [shard.data] + self._elementwise_state(shard)
            for start, stop in ranges:
                for a in arrays:
                    self._kept.append((a, start, stop, memory.register(a[start:stop].copy(), "workspace")))
        self.skipped = {}

    def _elementwise_state(self, shard):
        return [a for a in self.optimizer.state.get(shard, {}).values()
                if getattr(a, "shape", None) == shard.data.shape]

    def after_optimizer_step(self):
        for array, start, stop, values in self._kept:
            array[start:stop] = values
        for shard, ranges in self._fresh:  # as a plain optimizer: no state yet for those
            for a in self._elementwise_state(shard):
                for start, stop in ranges:
                    a[start:stop] = 0
        self._kept, self._fresh = [], []
        if self.stage < 3:  # put the updated shards back into every rank's full parameters
            for i, full in self.full.items():
                self.comm.all_gather(self.flats[i].shard_of(full), full)

    def gathered_state_dict(self):
        """Every parameter's full value (a collective: all ranks must call it), as ``state_dict``."""
        for i in range(len(self.units)):
            self._gather(i)
        state = self.model.state_dict()
        for i in range(len(self.units)):
            self._free(i)
        return state

