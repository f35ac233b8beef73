"""What a PyTorch step holds and does, read from the step's objects and from ``torch.profiler``.

Three readers for :func:`~tinymem.measure.torch_step.measure_torch_step` (torch is passed in, so
importing this file imports no torch):

- :func:`state_storages`: the storages alive when the step starts that the step's objects name:
  parameters, buffers, optimizer state, leftover ``.grad`` and the ``inputs``, each storage
  once (a tied weight is one storage), keyed by its address.
- :class:`StepHooks`: during the step, a mark in the profile each time autograd saves a tensor
  for backward (``saved_tensors_hooks``) and each time a parameter's ``.grad`` is accumulated
  (``register_post_accumulate_grad_hook``). A mark is an empty ``record_function`` named
  ``tinymem::saved <address>`` or ``tinymem::grad <address>``: it lands on the profiler's own
  clock, between the allocations around it.
- :class:`Profile`: the profiler's allocation records (address, signed bytes, time, the ops
  around it) and the marks, replayed in time order into :class:`~.torch_replay.Block` s.

The profiler reports a block's free only if it saw the block's allocation: a block allocated
before profiling began and freed while it runs leaves no record (torch warns "Memory block of
unknown size was allocated before the profiling started"), unless an earlier profile in the
process left a size for that address in torch's table (a block it saw, freed after it stopped):
then the free is reported and the replay takes it as seen, in the block's own bytes. The measurement profiles the step
before the measured one too, so what that step leaves (gradients, new optimizer state) is seen
from birth. A storage older than that, freed in the measured step, is counted freed when the
allocator hands its address out again, or, if it never does and the step's objects no longer
name it at the end, counted alive to the end: either way its bytes are ``missed_free_bytes``,
and the peak may hold up to that many bytes too many.
"""
from .torch_replay import Block

MARK = "tinymem::"
NODE = "autograd::engine::evaluate_function: "
OPTIMIZER_STEP = "Optimizer.step#"
UNSEEN = "(made before profiling)"
# Ops that only allocate: the op named at a block is the innermost op around it that is not one.
ALLOCATING = {"aten::empty", "aten::empty_like", "aten::empty_strided", "aten::new_empty",
              "aten::new_empty_strided", "aten::resize_"}


def storage_of(tensor):
    """``(address, bytes)`` of the tensor's storage, or None for a tensor without one (sparse, meta)."""
    try:
        storage = tensor.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return storage.data_ptr(), storage.nbytes()


def leaves(value):
    """Every value in a nest of tuples, lists and dicts that is not one of them."""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (tuple, list)):
            stack.extend(v)
        else:
            yield v


def _tensors(value, torch):
    return (v for v in leaves(value) if isinstance(v, torch.Tensor))


def state_storages(torch, model, optimizer, inputs, device_type):
    """``{address: (bytes, bucket)}`` of the storages on ``device_type`` that the step's objects
    hold now. A storage named twice keeps the bucket of highest rank (a weight that is also an
    input stays a parameter)."""
    named = [("parameter", model.parameters()), ("buffer", model.buffers()),
             ("optimizer", _tensors(list(optimizer.state.values()), torch)),
             ("input", _tensors(inputs, torch))]
    params = list(model.parameters()) + [p for g in optimizer.param_groups for p in g["params"]]
    named.append(("gradient", (p.grad for p in params if p.grad is not None)))
    out = {}
    for bucket, tensors in named:  # in rank order: the first bucket to name a storage keeps it
        for t in tensors:
            where = storage_of(t) if t.device.type == device_type else None
            if where is not None and where[1] > 0 and where[0] not in out:
                out[where[0]] = (where[1], bucket)
    return out


class StepHooks:
    """Marks for saved tensors and accumulated gradients while the block is open (see the module's
    docstring). The pack hook returns ``tensor.detach()``: the same storage, so the step's memory is
    unchanged, without the reference from a saved output back to its own graph node."""

    def __init__(self, torch, params):
        self.torch, self.params, self.handles, self.saving = torch, params, [], None

    def _mark(self, what, tensor):
        where = storage_of(tensor) if tensor is not None else None
        if where is not None:
            with self.torch.profiler.record_function(f"{MARK}{what} {where[0]}"):
                pass

    def _pack(self, tensor):
        self._mark("saved", tensor)
        return tensor.detach()

    def __enter__(self):
        self.saving = self.torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self.saving.__enter__()
        self.handles = [p.register_post_accumulate_grad_hook(lambda p: self._mark("grad", p.grad))
                        for p in self.params if p.requires_grad]
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.saving.__exit__(*exc)


def _records(tree, device_type, allocation_tag):
    """Allocation records ``(t, address, signed bytes, op, node, node_end)`` on ``device_type``
    and every named op ``(start, end, name)``, from the profiler's event tree, without recursion."""
    allocations, ops = [], []
    stack = [(n, (), None) for n in reversed(tree)]
    while stack:
        event, chain, node = stack.pop()
        if event.tag == allocation_tag:
            f = event.extra_fields
            if f.device.type == device_type and f.alloc_size:
                inner = [name for name in chain if name not in ALLOCATING] or list(chain) or ["-"]
                allocations.append((event.start_time_ns, f.ptr, f.alloc_size, inner[-1],
                                    None if node is None else node[0], None if node is None else node[1]))
            continue
        ops.append((event.start_time_ns, event.end_time_ns, event.name))
        if event.name.startswith(NODE):
            node, chain = (event.name[len(NODE):], event.end_time_ns), ()
        elif "::" in event.name and not event.name.startswith(MARK):  # an op, not a record_function
            chain = chain + (event.name,)
        stack.extend((c, chain, node) for c in reversed(event.children))
    return allocations, ops


class Profile:
    """The measured step read from a profile: ``baseline`` (Blocks alive at ``start``), ``blocks``
    (born after it), the phases' start times, the mark named at the step's start, and
    ``missed_free_bytes`` (see the module's docstring)."""

    def __init__(self, torch, prof, device_type, start_mark, known, known_at_end):
        allocation_tag = torch._C._profiler._EventType.Allocation
        allocations, ops = _records(prof.kineto_results.experimental_event_tree(),
                                    device_type, allocation_tag)
        self.start = min(s for s, _, name in ops if name == start_mark)
        nodes = [s for s, _, name in ops if s >= self.start and name.startswith(NODE)]
        steps = [s for s, _, name in ops if s >= self.start and name.startswith(OPTIMIZER_STEP)]
        self.backward_start = min(nodes, default=None)
        self.optimizer_start = min(steps, default=None)
        marks = [(s, name) for s, _, name in ops if name.startswith(MARK)]
        self._replay(allocations, marks, known)
        for b in self.blocks:  # state the step made (AdamW's on its first step, a new buffer)
            bucket = known_at_end.get(b.ptr, (0, None))[1] if b.died is None else None
            if bucket in ("parameter", "buffer", "optimizer"):
                b.labels.append((b.born, bucket))
        for b in self.baseline:  # named at the start, made before profiling, gone by the end: freed unseen
            if b.op == UNSEEN and b.died is None and known[b.ptr][1] != "temporary" and b.ptr not in known_at_end:
                self.missed_free_bytes += b.nbytes

    def _replay(self, allocations, marks, known):
        stream = [(a[0], 0, a) for a in allocations] + [(t, 1, name) for t, name in marks]
        stream.sort(key=lambda e: (e[0], e[1]))
        live, self.blocks, self.missed_free_bytes, self.baseline = {}, [], 0, None
        for t, kind, item in stream:
            if self.baseline is None and t >= self.start:
                self._begin(live, known)
            if kind == 1:
                what, _, ptr = item[len(MARK):].partition(" ")
                if what in ("saved", "grad") and int(ptr) in live and self.baseline is not None:
                    live[int(ptr)].labels.append((t, "activation" if what == "saved" else "gradient"))
                continue
            _, ptr, nbytes, op, node, node_end = item
            if nbytes > 0:
                old = live.pop(ptr, None)
                if old is not None:  # a baseline storage's free was never reported: freed before this
                    old.died = t
                    self.missed_free_bytes += old.nbytes
                block = Block(ptr, nbytes, t, op=op, node=node, node_end=node_end)
                live[ptr] = block
                if self.baseline is not None:
                    self.blocks.append(block)
            elif ptr in live:
                live.pop(ptr).died = t
        if self.baseline is None:
            self._begin(live, known)

    def _begin(self, live, known):
        """At the step's start: the blocks alive are the baseline; the step's objects name their
        buckets, and a storage the profile never saw being made joins the baseline from here."""
        for ptr, (nbytes, bucket) in known.items():
            if ptr not in live:
                live[ptr] = Block(ptr, nbytes, self.start, op=UNSEEN)
            live[ptr].labels.append((self.start, bucket))
        self.baseline = list(live.values())
