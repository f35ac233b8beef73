"""``tinymem plan --json``: the plan as one JSON object for scripts, every size in bytes.

The keys are stable (a later version may add keys, never rename or drop one). Every mode has
``"mode"`` (probe | training | layout | inference) and ``"exit_code"`` (the command's: 0 fits,
1 does not). The closed-form modes have ``"model"`` (the Arch's fields and ``"parameters"``)
and, with ``--config``, ``"config"`` (``family``, ``ignored``, ``defaults``). Then:

    training   "rows": one per stack of the table, including those the table folds on one GPU
               (:func:`stack_row`); "proposal": a row or null; "finetune": rows with --finetune;
               "explain": :func:`explain_rows` with --explain (null when nothing fits)
    layout     "rows": the layout's one row; "explain": its terms
    inference  "terms": [{"term", "formula", "bytes"}]; "total", "need", "fits"
    probe      "rows": one per combination; "proposal"; "verify" with --verify
    torch      "options", "peak", "moment", "moments" ({moment: {bucket: bytes}}), "buckets" (at the
               peak), "terms" ([{"bucket", "tensor", "formula", "bytes"}] alive at the peak),
               "measured" (false: a prediction no measurement has confirmed, as on CUDA)
    training and torch: "verify_torch" with --verify-torch ([{"bucket", "predicted", "measured",
               "predicted - measured"}])

A stack row is ``{"stack", "buckets": {parameter, gradient, optimizer, activation, workspace},
"host", "peak", "moment", "fits", "fewest_gpus", "time", "refused"}``: the table's columns
before they are rounded to GB, with ``refused`` the reason tinymem would not build it (or null).
"""
import json

from ..model import architectures
from .. import conventions
from ..terms.analytic import BUCKETS


def dumps(document):
    """The text printed: sorted keys, two-space indents, a final newline left to ``print``."""
    return json.dumps(document, indent=2, sort_keys=True)


def model(arch, config=None):
    """The ``"model"`` (and ``"config"``) keys of a closed-form document."""
    out = {"model": dict(arch._asdict(), parameters=architectures.parameter_count(arch))}
    if config is not None:
        out["config"] = {"family": config.family, "ignored": config.ignored, "defaults": config.defaults}
    return out


def stack_row(row):
    """One :class:`~.search.fits.Row` in bytes."""
    b = row.breakdown
    return {"stack": row.name, "buckets": {k: b.buckets[k] for k in BUCKETS}, "host": b.host, "peak": b.peak,
            "moment": b.moment, "fits": bool(row.fits), "fewest_gpus": row.fewest_gpus, "time": row.time,
            "refused": row.refused}


def explain_rows(arch, row, convention, table):
    """``--explain``'s terms in bytes: ``table`` the convention's resolved rows
    (:func:`.conventions.resolved_rows`), then the activation and workspace buckets' own peaks."""
    out = [{"term": r.term, "bucket": r.bucket, "per_parameter": r.per_parameter, "divisor": r.divisor,
            "count": r.count, "bytes": conventions.row_bytes(r), "place": r.place} for r in table]
    for bucket in ("activation", "workspace"):
        out.append({"term": f"{bucket}s (the bucket's own peak)", "bucket": bucket, "per_parameter": None,
                    "divisor": None, "count": None, "bytes": row.breakdown.buckets[bucket], "place": "device"})
    return out


def finetune_row(r, usable):
    return {"method": r.method, "base": r.base, "adapters": r.adapters, "activation": r.activation,
            "workspace": r.workspace, "peak": r.peak, "fits": r.peak <= usable}


def probe_row(r):
    """One combination of the probe planner in bytes (:func:`tinymem.planner.plan`'s rows)."""
    c = r.combo
    return {"checkpoint": c.checkpoint, "precision": c.precision, "optimizer": c.optimizer, "offload": c.offload,
            "micro_batches": c.micro_batches, "buckets": dict(r.prediction.by_bucket), "peak": r.prediction.total,
            "states": sum(r.states.values()), "fits": bool(r.fits), "checked": bool(r.prediction.exact),
            "seconds": r.seconds, "phase": r.prediction.phase}
