"""Binomial checkpointing (Griewank and Walther's Revolve): the fewest recomputations for s slots.

The chain x_0 -> x_1 -> ... -> x_l applies one layer per step. A *slot* holds one state x_i (the
input x_0 takes one of them). Reversing the chain needs, for every step i, the state x_i while
the gradient of x_{i+1} is at hand. With s slots the fewest forward steps to recompute is

    r = the smallest integer with C(s + r, s) >= l,      forwards(l, s) = r·l - C(s + r, s + 1)

(l = 64: s = 4 gives 200, s = 8 gives 137; s = 1 gives l(l-1)/2). The schedule below reaches it
by the recursion "advance j steps, keep x_j in a new slot, reverse the last l - j steps with one
slot fewer, free the slot, restore x_0, reverse the first j steps", with j chosen to minimise
j + forwards(l - j, s - 1) + forwards(j, s).

Memory: s states plus the saved arrays of one step (one layer's tape) at any time: O(1) in the
depth for a fixed s, paid for with about r forward passes instead of one.
Time: l taped forwards (one per backward step, as without checkpointing) plus forwards(l, s)
extra layer evaluations.

Actions of a schedule (``Action(kind, step, end)``):
  ``snapshot i``   keep the current state x_i in a free slot
  ``advance i j``  run layers i .. j-1 without recording: x_i -> x_j
  ``backward i``   run layer i recording its graph and backpropagate the gradient of x_{i+1}
  ``restore i``    make the kept x_i the current state
  ``free i``       give x_i's slot back
"""
from collections import namedtuple
from math import comb

from ... import autograd, backend, memory, random
from ...autograd import Function, Tensor, no_grad
from ...checks import positive_int
from .segments import Segment, as_layer_list, backprop, record, replay

Action = namedtuple("Action", "kind step end", defaults=(None,))


def repetitions(n_steps, slots):
    """The smallest r with C(slots + r, slots) >= n_steps (how often the worst step is run)."""
    r = 0
    while comb(slots + r, slots) < n_steps:
        r += 1
    return r


def binomial_forwards(n_steps, slots):
    """The fewest extra forward steps to reverse ``n_steps`` steps with ``slots`` slots."""
    _check(n_steps, slots)
    r = repetitions(n_steps, slots)
    return r * n_steps - comb(slots + r, slots + 1)


def _check(n_steps, slots):
    positive_int("revolve: n_steps", n_steps)
    positive_int("revolve: slots", slots)


def _best_split(length, slots):
    """The j that minimises j + forwards(length - j, slots - 1) + forwards(j, slots)."""
    return min(range(1, length),
               key=lambda j: j + binomial_forwards(length - j, slots - 1) + binomial_forwards(j, slots))


class Schedule(list):
    """A list of :class:`Action` s with ``n_steps``, ``slots`` and ``forwards`` (advance steps)."""

    def __init__(self, steps, n_steps, slots):
        super().__init__(steps)
        self.n_steps, self.slots = n_steps, slots
        self.forwards = sum(a.end - a.step for a in self if a.kind == "advance")

    def max_slots_used(self):
        used = peak = 0
        for a in self:
            used += (a.kind == "snapshot") - (a.kind == "free")
            peak = max(peak, used)
        return peak


def revolve(n_steps, slots):
    """The optimal schedule reversing ``n_steps`` steps with ``slots`` slots (x_0 included), as a
    list (to read, count or draw it; :func:`actions` hands the same actions out one at a time).

    Memory: O(n_steps) actions.
    """
    return Schedule(actions(n_steps, slots), n_steps, slots)


def actions(n_steps, slots):
    """The actions of :func:`revolve` one at a time, made as they are needed.

    Built iteratively (a stack of pending tasks), so deep chains need no recursion. Memory: at
    most 3·slots pending tasks, whatever ``n_steps`` is; this is what
    :func:`checkpoint_revolve` runs, so its bookkeeping does not grow with the depth as a
    precomputed list would.
    """
    _check(n_steps, slots)
    return _actions(n_steps, slots)


def _actions(n_steps, slots):
    yield Action("snapshot", 0)
    # Each task reverses steps [a, b) with s slots, the current state being x_a (kept in a slot).
    # Only the s - 1 branch nests, so the stack holds at most 3 tasks per slot.
    tasks = [("reverse", 0, n_steps, slots)]
    while tasks:
        task = tasks.pop()
        if task[0] != "reverse":
            yield Action(*task)
            continue
        _, a, b, s = task
        if b - a == 1:
            yield Action("backward", a)
        elif s == 1:
            for k in range(b - 1, a - 1, -1):
                if k != b - 1:
                    yield Action("restore", a)
                if k > a:
                    yield Action("advance", a, k)
                yield Action("backward", k)
        else:
            j = _best_split(b - a, s)
            yield Action("advance", a, a + j)
            yield Action("snapshot", a + j)
            # pushed in reverse: the tasks run from the top of the stack
            tasks.append(("reverse", a, a + j, s))
            tasks.append(("restore", a))
            tasks.append(("free", a + j))
            tasks.append(("reverse", a + j, b, s - 1))
    yield Action("free", 0)


class RevolveFunction(Function):
    """One node for a whole chain of layers, run under a :func:`revolve` schedule.

    Forward runs the schedule up to its first backward action (advancing once through every
    layer and keeping the snapshots), then runs the last layer with its graph recorded: that
    tape is the first backward step. Backward runs the rest of the schedule, made as it goes
    (:func:`actions`). Each slot keeps, beside its state x_i, the RNG state layer i started
    from (16 bytes): advancing from x_i draws the same numbers in the same order, so recomputed
    dropout masks are the original ones, and the bookkeeping is O(slots), not O(layers). Like
    the checkpoint node, the parameters are inputs only so that the node records.
    """

    def forward(ctx, x, *params, layers, schedule, preserve_rng_state):
        ctx.layers, ctx.preserve = layers, preserve_rng_state
        ctx.contexts = autograd.forward_contexts()
        ctx.snapshots, ctx.tape, ctx.consumed = {}, None, False
        if not ctx.recording:
            with no_grad():
                return Segment(layers)(Tensor.wrap(x)).data
        # the RNG state the layer fed by the current state starts from (None: not preserved)
        ctx.rng = random.get_rng_state() if preserve_rng_state else None
        remaining = iter(schedule)
        state = x
        for action in remaining:
            if action.kind == "backward":
                break
            state = ctx._act(action, state)
        last = len(layers) - 1
        needs = ctx.needs_input_grad[0] if last == 0 else True
        outputs, box = record(layers[last], [state], [needs])
        ctx.tape = (outputs, box, (state.shape, state.dtype))
        ctx.remaining = remaining
        return outputs[0].data

    def _act(ctx, action, state):
        kind = action.kind
        if kind == "advance":
            if ctx.preserve:
                random.set_rng_state(ctx.rng)
            for k in range(action.step, action.end):
                with no_grad():
                    state = ctx.layers[k](Tensor.wrap(state)).data
            if ctx.preserve:
                ctx.rng = random.get_rng_state()
            return state
        if kind == "snapshot":
            memory.hold(state)
            ctx.snapshots[action.step] = (state, ctx.rng)
            return state
        if kind == "restore":
            state, ctx.rng = ctx.snapshots[action.step]
            return state
        if kind == "free":
            memory.unhold(ctx.snapshots.pop(action.step)[0])
            return state
        raise ValueError(f"unknown schedule action {kind!r}")

    def backward(ctx, g):
        if ctx.consumed:
            raise RuntimeError("checkpoint_revolve frees its snapshots during backward; it cannot "
                               "backward a second time (retain_graph is not supported)")
        ctx.consumed = True
        outer = random.get_rng_state()
        xp = backend.array_module(g)
        outputs, box, meta = ctx.tape  # the last layer's graph, recorded in forward
        ctx.tape = None
        try:
            backprop(outputs, [g])
            del outputs
            g = box[0]
            state = None
            for action in ctx.remaining:
                if g is None:  # the layer's output did not depend on its input
                    g = xp.zeros(*meta)
                if action.kind != "backward":
                    with autograd.recomputing(ctx.contexts):
                        state = ctx._act(action, state)
                    continue
                needs = [ctx.needs_input_grad[0] if action.step == 0 else True]
                meta = (state.shape, state.dtype)
                g = replay(ctx.layers[action.step], [state], needs, [g], ctx.rng, contexts=ctx.contexts)[0]
        finally:
            random.set_rng_state(outer)
            ctx._free_all()
        return (g,) + (None,) * (len(ctx.needs_input_grad) - 1)

    def _free_all(ctx):
        for snap, _ in ctx.snapshots.values():
            memory.unhold(snap)
        ctx.snapshots, ctx.tape = {}, None

    def release_saved(ctx):
        ctx._free_all()
        super().release_saved()

    def __del__(ctx):
        if getattr(ctx, "snapshots", None):
            ctx._free_all()
        super().__del__()


def checkpoint_revolve(functions, slots, input, preserve_rng_state=True):
    """Run ``functions`` (a list or ``nn.Sequential``) on ``input`` under ``revolve(n, slots)``.

    Memory: at most ``slots`` states (the input among them) plus one layer's saved arrays.
    Time: n taped forwards plus ``binomial_forwards(n, slots)`` recomputed layer forwards.
    """
    layers = as_layer_list(functions)
    schedule = actions(len(layers), slots)
    if not autograd.is_grad_enabled():
        return Segment(layers)(input)
    params = Segment(layers).parameters()
    return RevolveFunction.apply(input, *params, layers=layers, schedule=schedule,
                                 preserve_rng_state=preserve_rng_state)
