"""The two-point probe: the real step at micro-batches of 2 and 3 samples, extrapolated to m.

What it does. For one combination it builds the model and optimizer and, for each size, takes
a warm-up step (so the optimizer state exists, as in every step after the first), frees the
gradients, and then runs the real training step twice under the ledger: with micro-batches of m = 2 and m = 3
samples (k = 2 micro-batches when the combination micro-batches, else 1). Not m = 1: a batch of
one sample is a degenerate shape (a transposed (1, C, H, W) array is already contiguous, so an
op skips a copy it makes for every larger batch), and the two runs would not line up. Each run gives the
ledger's timeline: after every allocation and free, the device bytes of each bucket. Each
measured step reuses the batch of a warm-up step just before it, as :mod:`.verify` does, so the
batch is already counted (an op registers an input array it saves) when the window opens.

Why linear extrapolation is exact here. The two runs execute the same code, so they make the
same allocations in the same order: event i of one run is event i of the other (a garbage
collection first, so that no leftover of an earlier run is freed in the middle of one). For the MLP,
the Transformer LM and the U-Net every array is either independent of the batch (weights,
gradients, optimizer state, BatchNorm statistics) or has the batch as its leading dimension, so
at every event each bucket holds c + a·m bytes. Two runs give c and a for every event and every
bucket; the prediction at m is the largest total over the events, with its split by bucket.
Taking the max *after* extrapolating matters: the event where the peak falls may change with m
(a weight-sized temporary at m = 1, a batch-sized one at m = 512).

Where it stops being exact (said in the report, never hidden): when the two runs' event lists
differ in length it falls back to extrapolating each bucket's value at the peak (``exact`` is
False); a convolution builds its column matrix in blocks of at most ``WORKSPACE_ELEMENTS``, so
once one block no longer holds the whole micro-batch the real workspace stops growing and the
prediction becomes an upper bound.

A self-check. The probe also runs the step at ``CHECK`` = 5 samples and holds the
extrapolation from 2 and 3 against it; a probe that fails is run once more from a fresh model,
and if it still fails its check it is marked ``exact=False`` rather than trusted (the plan shows
it as not checked and proposes it only when no checked combination fits). The check once caught
a real bug: half precision's recomputation context kept every half copy of the forward alive
until the last checkpoint node died, so checkpointed half Transformers did not extrapolate.
Measured after the fix in one long run of 150 Transformer combinations at a batch of 20 (and
150 MLP, 100 U-Net ones): every prediction exact, every event list aligned.

The batch itself (inputs and labels, live through the whole step) is taken out of the probe and
added back for the full batch B: with micro-batching it stays B samples while the activations
follow m = ceil(B / k), the largest micro-batch (exact when k divides B, an upper bound otherwise).
"""
import gc
import math
from collections import namedtuple

from ... import memory, random
from ...autograd import Tensor
from ...checks import positive_int
from ...memory import BUCKETS
from ..terms.moments import micro_batch_sizes
from .recipe import TrainingStep

SIZES = (2, 3)
CHECK, CHECK_TOLERANCE = 5, 0.005  # a third size the extrapolation must predict, and how well

Probe = namedtuple("Probe", "combo events exact batch_bytes_per_sample phases")
Probe.__doc__ = """``events[m]``: per-event bucket bytes (lists of dicts) at micro-batch m in SIZES,
the batch's own bytes taken out; ``batch_bytes_per_sample``: per bucket; ``phases[m]``: the phase
label (forward / backward / optimizer) in force at each event."""

Prediction = namedtuple("Prediction", "total by_bucket phase exact")


def batch_bytes(batch):
    """Device bytes of the batch's arrays, per bucket, as the ledger counts them now."""
    own = dict.fromkeys(BUCKETS, 0)
    for part in batch:
        array = part.data if isinstance(part, Tensor) else part
        where = memory.locate(array)
        if where is not None and where[1] == "device":
            own[where[0]] += array.nbytes
    return own


def _run(workload, combo, seed, sizes):
    random.manual_seed(seed)
    gc.collect()
    base = memory.LEDGER.by_bucket()
    k = 1 if combo.micro_batches == 1 else 2
    step = TrainingStep(workload, combo._replace(micro_batches=k))
    try:
        events, phases, kinds, per_sample = {}, {}, {}, None
        for m in sizes:
            batch = workload.batch(k * m)
            step.step(batch)
            step.optimizer.zero_grad()
            own = batch_bytes(batch)
            gc.collect()
            with memory.track(measure=False) as t:
                entry = t.current_by_bucket()
                step.step(batch)
            rows, labels, phase = [entry], ["start"], "start"
            for e in t.timeline():
                if e["kind"] == "mark":
                    phase = e["label"]
                rows.append(e["live"])
                labels.append(phase)
            events[m] = [{b: row[b] - base[b] - own[b] for b in BUCKETS} for row in rows]
            phases[m] = labels
            kinds[m] = [(e["kind"], e["bucket"]) for e in t.timeline()]
            per_sample = {b: own[b] / (k * m) for b in BUCKETS}
            del batch
    finally:
        step.close()
    # The runs line up when they made as many events. Their kinds may still differ at a few
    # places: a small array freed one event earlier at one size than at the other (seen once,
    # 64 bytes, in a half-precision Transformer); extrapolating event by event stays exact there
    # up to those bytes.
    exact = len(kinds[sizes[0]]) == len(kinds[sizes[1]])
    return Probe(combo, events, exact, per_sample, phases)


def run_probe(workload, combo, seed=0, check=True):
    """Probe ``combo`` on ``workload`` (see the module docstring); returns a :class:`Probe`.

    ``check``: also run the step at ``CHECK`` samples and hold the extrapolation against it;
    when they disagree by more than ``CHECK_TOLERANCE``, probe once more from a fresh model
    (seen: a half-precision checkpointed Transformer probed right after another half-precision
    run), and if the second probe fails its check too, return it marked ``exact=False``.
    """
    if not check:
        return _run(workload, combo, seed, SIZES)
    for _ in range(2):
        probe = _run(workload, combo, seed, SIZES + (CHECK,))
        total = max(sum(row.values()) for row in probe.events[CHECK])
        predicted = _extrapolated_max(probe, CHECK)
        probe = probe._replace(events={m: probe.events[m] for m in SIZES},
                               phases={m: probe.phases[m] for m in SIZES})
        if probe.exact and abs(predicted - total) <= CHECK_TOLERANCE * total:
            return probe
    return probe._replace(exact=False)


def _extrapolated_max(probe, m):
    if len(probe.events[SIZES[0]]) != len(probe.events[SIZES[1]]):
        return math.inf
    return max(sum(_at(r1, r2, m).values()) for r1, r2 in zip(probe.events[SIZES[0]], probe.events[SIZES[1]]))


def _at(row1, row2, m):
    m1, m2 = SIZES
    return {b: row1[b] + (row2[b] - row1[b]) * (m - m1) / (m2 - m1) for b in BUCKETS}


def predict(probe, batch_size, micro_batches=None):
    """The step's device peak at ``batch_size`` in ``micro_batches`` (default: the probed
    combination's; every k >= 2 shares the probe of k = 2): a :class:`Prediction` (bytes;
    ``by_bucket`` sums to ``total``; ``phase`` where the peak falls)."""
    positive_int("batch_size", batch_size)
    k = probe.combo.micro_batches if micro_batches is None else positive_int("micro_batches", micro_batches)
    if (k > 1) != (probe.combo.micro_batches > 1):
        raise ValueError(f"a probe of {probe.combo.micro_batches} micro-batch(es) cannot predict k = {k}: "
                         "probe k = 1 and k >= 2 separately")
    # The probe's micro-batches are equal; a real batch that k does not divide splits into
    # pieces one sample apart (and a batch smaller than k into min(k, B) pieces, see recipe.py).
    # Every event is evaluated at the largest piece, so such a prediction is an upper bound
    # (by a gradient set, measured, when the larger piece runs first) and is not called exact.
    pieces = micro_batch_sizes(batch_size, min(k, batch_size))
    m = max(pieces)
    exact = probe.exact and len(set(pieces)) == 1 and (k == 1) == (len(pieces) == 1)
    batch = {b: probe.batch_bytes_per_sample[b] * batch_size for b in BUCKETS}
    if probe.exact:
        best, phase = None, None
        for row1, row2, label in zip(probe.events[SIZES[0]], probe.events[SIZES[1]], probe.phases[SIZES[1]]):
            row = _at(row1, row2, m)
            if best is None or sum(row.values()) > sum(best.values()):
                best, phase = row, label
    else:
        peaks = {}
        for size in SIZES:
            rows = probe.events[size]
            i = max(range(len(rows)), key=lambda j: sum(rows[j].values()))
            peaks[size], phase = rows[i], probe.phases[size][i]
        best = _at(peaks[SIZES[0]], peaks[SIZES[1]], m)
    by_bucket = {b: int(round(best[b] + batch[b])) for b in BUCKETS}
    return Prediction(sum(by_bucket.values()), by_bucket, phase, exact)
