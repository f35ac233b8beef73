"""Choose a checkpointing schedule for a byte budget on activations.

Users of ``torch.utils.checkpoint`` keep asking for "give me a memory budget, not a segment
count". Here the answer is three steps:

1. :func:`profile_layers` runs each layer once, alone, with its graph recorded, and reads from
   the ledger how many ``activation`` bytes it saves and how big its output state is. Memory of
   the profile: one layer's graph at a time (never the whole network's).
2. :func:`predict_segments` and :func:`predict_revolve` turn those sizes into the activation
   peak a schedule will reach, counting a buffer once where the ledger does (a kept segment
   input that its first layer also saves; a ReLU's saved output that the next Linear saves).
3. :func:`choose_schedule` takes, of all schedules whose predicted peak fits the budget, the one
   that recomputes the fewest layer forwards (segment counts 1..n, then revolve with 1..n slots).

Pitfall: the profile is for one input shape; a bigger batch needs a new profile.
"""
from collections import namedtuple

from ... import autograd, memory, random
from ...autograd import Tensor
from ...memory import OutOfMemoryError, format_bytes
from .segments import as_layer_list, checkpoint_sequential, record, resolve_segments
from .revolve import binomial_forwards, checkpoint_revolve, revolve

LayerProfile = namedtuple("LayerProfile", "saved_bytes output_bytes own_bytes saves_input saves_output")
LayerProfile.__doc__ = """What one layer keeps for backward: ``saved_bytes`` in all, of which its input
(``saves_input``), its output (``saves_output``) and ``own_bytes`` of other arrays (a mask, x-hat).
Knowing which buffers are states matters: the ledger counts a buffer once, so a ReLU's saved
output and the next Linear's saved input, or a kept segment input, are the same bytes."""


def profile_layers(functions, input):
    """Per layer, what it saves for backward (a :class:`LayerProfile`), read from the ledger.

    Runs under :class:`tinymem.autograd.recomputing` (no running statistics are touched) and
    gives the RNG state back, so profiling does not change the training run.
    """
    layers = as_layer_list(functions)
    rng = random.get_rng_state()
    state = input.data if isinstance(input, Tensor) else input
    profile = []
    try:
        with autograd.recomputing():
            for layer in layers:
                before = memory.live_bytes("activation")
                outputs, _ = record(layer, [state], [True])
                saved = memory.live_bytes("activation") - before
                saves_input = memory.holds(state) > 0
                out = outputs[0].data
                saves_output = memory.holds(out) > 0 and out is not state
                own = saved - saves_input * state.nbytes - saves_output * out.nbytes
                profile.append(LayerProfile(saved, int(out.nbytes), own, saves_input, saves_output))
                state = out
                del outputs
    finally:
        random.set_rng_state(rng)
    return profile


def _states(profile, input_bytes):
    """Bytes of x_0 .. x_n (x_i is the input of layer i)."""
    return [input_bytes] + [p.output_bytes for p in profile]


def _recorded(profile, states, start, end):
    """The buffers layers start..end-1 keep when run with their graph, by identity."""
    live = {}
    for i in range(start, end):
        p = profile[i]
        live[("own", i)] = p.own_bytes
        if p.saves_input:
            live[("x", i)] = states[i]
        if p.saves_output:
            live[("x", i + 1)] = states[i + 1]
    return live


def _total(*parts):
    merged = {}
    for part in parts:
        merged.update(part)
    return sum(merged.values())


def predict_segments(profile, input_bytes, segments):
    """The activation peak of ``checkpoint_sequential(..., segments, ...)``, from the profile.

    The kept inputs of checkpointed segments 0..m stay while segment m is recomputed; the last
    segment's saved arrays stay while the kept inputs of all others do.
    """
    n = len(profile)
    k = resolve_segments(segments, n)
    size = n // k
    states = _states(profile, input_bytes)
    starts = list(range(0, size * (k - 1), size))
    kept = {("x", s): states[s] for s in starts}
    peak = _total(kept, _recorded(profile, states, size * (k - 1), n))
    for m, s in enumerate(starts):
        kept_now = {("x", t): states[t] for t in starts[:m + 1]}
        peak = max(peak, _total(kept_now, _recorded(profile, states, s, s + size)))
    return peak


def predict_revolve(profile, input_bytes, slots):
    """The activation peak of ``checkpoint_revolve(..., slots, ...)``: the kept snapshots plus
    the saved arrays of the layer being reversed, followed along the schedule."""
    states = _states(profile, input_bytes)
    kept, peak = {}, 0
    for action in revolve(len(profile), slots):
        if action.kind == "snapshot":
            kept[("x", action.step)] = states[action.step]
        elif action.kind == "free":
            del kept[("x", action.step)]
        elif action.kind == "backward":
            peak = max(peak, _total(kept, _recorded(profile, states, action.step, action.step + 1)))
    return peak


class Plan(namedtuple("Plan", "kind count predicted_peak recomputed")):
    """A chosen schedule: ``kind`` is ``"segments"`` or ``"revolve"``, ``count`` the segment
    count or the slots, ``recomputed`` the layer forwards it adds. Call it like the function it
    stands for: ``plan(functions, input)``."""

    def __call__(self, functions, input):
        if self.kind == "segments":
            return checkpoint_sequential(functions, self.count, input)
        return checkpoint_revolve(functions, self.count, input)


def candidate_plans(profile, input_bytes):
    """Every segment count and every slot count, with predicted peak and recomputation."""
    n = len(profile)
    plans = [Plan("segments", k, predict_segments(profile, input_bytes, k), (k - 1) * (n // k))
             for k in range(1, n + 1)]
    plans += [Plan("revolve", s, predict_revolve(profile, input_bytes, s), binomial_forwards(n, s))
              for s in range(1, n + 1)]
    return plans


def choose_schedule(functions, input, budget):
    """The plan that fits ``budget`` (bytes or "64MB") in activations with the fewest recomputed
    layer forwards (ties: the smaller peak). Raises OutOfMemoryError when none fits."""
    budget = memory.parse_bytes(budget)
    layers = as_layer_list(functions)
    input_bytes = int((input.data if isinstance(input, Tensor) else input).nbytes)
    plans = candidate_plans(profile_layers(layers, input), input_bytes)
    fitting = [p for p in plans if p.predicted_peak <= budget]
    if not fitting:
        smallest = min(plans, key=lambda p: p.predicted_peak)
        raise OutOfMemoryError(
            f"no checkpointing schedule fits an activation budget of {format_bytes(budget)}: the "
            f"smallest ({smallest.kind}={smallest.count}) needs {format_bytes(smallest.predicted_peak)}; "
            f"raise the budget, shrink the batch or use another technique (offload, half precision)")
    return min(fitting, key=lambda p: (p.recomputed, p.predicted_peak))
