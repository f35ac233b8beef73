"""The plan: every combination's predicted peak per bucket, which fit, and the fastest that does.

``plan("mlp", "64,1024,1024,10", batch_size=512, budget="64MB")`` enumerates the combinations
of :mod:`.recipe` (those that compose), probes each distinct one once (:mod:`.probe`; all
micro-batch counts k >= 2 share one probe), predicts its device peak at the batch size, checks
it against the budget, predicts its time (:mod:`.timing`) and proposes the fastest that fits.
Micro-batch counts tried: powers of two that divide the batch and leave at least 2 samples per
micro-batch (a 1-sample micro-batch is a degenerate shape the probe does not extrapolate to).
"""
import itertools
from collections import namedtuple

from ...checks import positive_int
from ...memory import BUCKETS, format_bytes, parse_bytes
from ..measured.probe import predict, run_probe
from ..measured.recipe import OFFLOADS, OPTIMIZERS, PRECISIONS, Combination, supported
from ..terms.states import buffer_bytes, model_states, parameter_shapes
from ..report.timing import TimeModel
from ..measured.workloads import workload as make_workload

Row = namedtuple("Row", "combo prediction states fits seconds")
Row.__doc__ = """One combination: its :class:`~.probe.Prediction` (peak bytes per bucket), the model
states by formula (:func:`~.states.model_states`), whether the peak fits the budget, and the
predicted seconds of a step."""

Plan = namedtuple("Plan", "workload batch_size budget rows proposal")


def micro_batch_counts(batch_size, largest=None):
    counts, k = [], 1
    while batch_size % k == 0 and batch_size // k >= 2 and (largest is None or k <= largest):
        counts.append(k)
        k *= 2
    return counts or [1]


def combinations(work, batch_size, schedules=None, precisions=PRECISIONS, optimizers=OPTIMIZERS,
                 offloads=OFFLOADS, micro_batches=None):
    """Every supported :class:`Combination` for ``work`` at ``batch_size``."""
    counts = micro_batches or micro_batch_counts(batch_size)
    for values in itertools.product(schedules or work.schedules, precisions, optimizers, offloads, counts):
        combo = Combination(*values)
        if supported(combo) is None:
            yield combo


def plan(model, sizes, batch_size, budget, schedules=None, precisions=PRECISIONS,
         optimizers=OPTIMIZERS, offloads=OFFLOADS, micro_batches=None, progress=None):
    """Predict every combination and propose the fastest that fits ``budget``; returns a Plan.

    ``progress``: an optional callable wrapping the probe loop (``tqdm``, say).
    """
    work = make_workload(model, sizes) if isinstance(model, str) else model
    budget = parse_bytes(budget)
    positive_int("batch_size", batch_size)
    for count in micro_batches or ():
        positive_int("each of micro_batches", count)
    for what, given, known in (("checkpoint schedule", schedules, work.schedules),
                               ("precision", precisions, PRECISIONS), ("optimizer", optimizers, OPTIMIZERS),
                               ("offload", offloads, OFFLOADS)):
        if isinstance(given, str):  # read letter by letter: unknown 'f', 'p', '1', '6'
            raise TypeError(f"the {what}s to try are a list of names, got the string {given!r}: pass [{given!r}]")
        unknown = [g for g in given or () if g not in known]
        if unknown:
            raise ValueError(f"unknown {what} {', '.join(map(repr, unknown))}; choose from "
                             f"{', '.join(map(repr, known))}")
    if batch_size < 2:
        raise ValueError(f"batch_size must be at least 2 (the probe extrapolates from 2 and 3 samples), got {batch_size}")
    combos = list(combinations(work, batch_size, schedules, precisions, optimizers, offloads, micro_batches))
    keys = sorted({c._replace(micro_batches=min(c.micro_batches, 2)) for c in combos})
    probes = {}
    for key in (progress(keys) if progress else keys):
        probes[key] = run_probe(work, key)
    plain = work.build("none")
    shapes, buffers = parameter_shapes(plain), buffer_bytes(plain)
    times = TimeModel(work, batch_size, sorted({c.precision for c in combos}),
                      sorted({c.optimizer for c in combos}), sorted({c.offload for c in combos}))
    rows = []
    for combo in combos:
        k = combo.micro_batches
        prediction = predict(probes[combo._replace(micro_batches=min(k, 2))], batch_size, k)
        kept = combo._replace(offload="none", micro_batches=min(k, 2))
        activations = (predict(probes[kept], batch_size, k).by_bucket["activation"]
                       if combo.offload == "activations" and kept in probes else 0)
        seconds = times.seconds(combo, batch_size, activations)
        rows.append(Row(combo, prediction, model_states(shapes, combo, buffers), True, seconds))
    return with_budget(Plan(work, batch_size, None, rows, None), budget)


def with_budget(result, budget):
    """The same plan under another budget (no new probe): which fit, and the new proposal."""
    budget = parse_bytes(budget)
    rows = [r._replace(fits=budget is None or r.prediction.total <= budget) for r in result.rows]
    fitting = [r for r in rows if r.fits]
    # A prediction whose probe failed its self-check (probe.py) is proposed only when no
    # checked one fits.
    proposal = (min(fitting, key=lambda r: (not r.prediction.exact, r.seconds, r.prediction.total))
                if fitting else None)
    return result._replace(budget=budget, rows=rows, proposal=proposal)


def describe(combo):
    parts = [f"checkpoint={combo.checkpoint}", combo.precision, combo.optimizer]
    if combo.offload != "none":
        parts.append(f"offload {combo.offload}")
    if combo.micro_batches > 1:
        parts.append(f"k={combo.micro_batches}")
    return ", ".join(parts)


HEADERS = {"parameter": "param", "gradient": "grad", "optimizer": "optim", "activation": "activ",
           "workspace": "work"}  # the closed form's table's names (b[:5] gave "gradi", "works")


def table_rows(result, top=None):
    """Rows for ``cli.print_table``: fitting combinations first, checked predictions first,
    fastest first (``top`` of them)."""
    ordered = sorted(result.rows, key=lambda r: (not r.fits, not r.prediction.exact, r.seconds))
    out = []
    for r in ordered[:top]:
        c = r.combo
        row = {"ckpt": c.checkpoint, "prec": c.precision, "optimizer": c.optimizer, "offload": c.offload,
               "k": c.micro_batches}
        row.update({HEADERS[b]: format_bytes(r.prediction.by_bucket[b]) for b in BUCKETS})
        row.update({"peak": format_bytes(r.prediction.total), "states(formula)": format_bytes(sum(r.states.values())),
                    "fits": "yes" if r.fits else "no", "checked": "yes" if r.prediction.exact else "NO",
                    "pred ms": round(1e3 * r.seconds, 2),
                    "peak in": r.prediction.phase})
        out.append(row)
    return out


def summary(result):
    """A few lines: how many fit, and the proposal with its predicted peak and time."""
    fitting = sum(r.fits for r in result.rows)
    budget = "no budget" if result.budget is None else f"budget {format_bytes(result.budget)}"
    lines = [f"{result.workload!r}, batch {result.batch_size}, {budget}: "
             f"{fitting} of {len(result.rows)} combinations fit"]
    unchecked = sum(not r.prediction.exact for r in result.rows)
    if unchecked:
        lines.append(f"{unchecked} predictions failed the probe's self-check (column checked = NO): "
                     "treat them as estimates")
    p = result.proposal
    if p is None:
        best = min(result.rows, key=lambda r: r.prediction.total)
        lines.append(f"nothing fits; the smallest peak is {format_bytes(best.prediction.total)} "
                     f"({describe(best.combo)})")
    else:
        lines.append(f"proposal: {describe(p.combo)} -> predicted peak {format_bytes(p.prediction.total)} "
                     f"({p.prediction.total:,d} B), predicted step {1e3 * p.seconds:.1f} ms")
    return "\n".join(lines)


def verify_rows(result, measured):
    """Predicted against ledger against measured, per bucket, for the proposal."""
    p = result.proposal.prediction
    rows = [{"bucket": b, "predicted": p.by_bucket[b], "ledger": measured["by_bucket"].get(b, 0)} for b in BUCKETS]
    rows.append({"bucket": "peak", "predicted": p.total, "ledger": measured["ledger"]})
    for row in rows:
        row["error"] = f"{(row['predicted'] - row['ledger']) / max(row['ledger'], 1):+.2%}"
    return rows


def peak_error(prediction, measured):
    """Relative error of a prediction against the ledger's peak of the real step."""
    return (prediction.total - measured["ledger"]) / measured["ledger"]

