"""Claims as code: what a figure, its caption, the README and the lesson say, checked on its records.

A figure family declares ``CLAIMS``, a list of :class:`Claim`. Each claim names the sentence it
supports and a function of the family's records that returns ``(value, holds)``: the measured
number the sentence rests on and whether the sentence is true of it. ``modes`` says at which
sizes the claim is meant to hold (``"quick"``, ``"full"`` or both): an effect that needs a big
model to rise above the noise is marked ``("full",)`` and is not judged at quick sizes.

    CLAIMS = [
        Claim("sqrt_activations", "sqrt(n) segments keep <= 0.3x the activations of plain at n = 64",
              lambda r: (r["ratio"], r["ratio"] <= 0.3), modes=("full",)),
    ]

A run that could not measure (records with ``"skipped": reason``, e.g. no MPI) judges no claim:
each row says ``not_measured`` with the reason, instead of failing on the missing numbers. A
check that finds its run unable to show the claim (say, a machine too busy to give a thread the
core the claim needs) returns ``(reason, None)``: that row too is ``not_measured``, with the reason,
rather than failed or loosened until it passes.

``evaluate(CLAIMS, records, quick)`` gives one row per claim; ``tinymem figures`` prints them as a
table, writes them into the family's JSON under ``"claims"``, puts failed ones in the figure's
footer and, with ``--strict``, exits non-zero when one fails. Memory and time: negligible.
"""
import math
from dataclasses import dataclass, field

from .timing import paired_turns

SLOWER_SHARE = 0.8
# The estimator every "A is slower than B" claim names, in its text. With 15 turns, 12 or more
# slower turns come by chance (no difference: each turn a coin toss) with probability 1.8%.
IN_TURNS = (f"in >= {SLOWER_SHARE:.0%} of paired interleaved turns and by lower quartiles "
            "(shown: those turns, ratio of lower quartiles)")


@dataclass(frozen=True)
class Claim:
    """One checked sentence: ``check(records) -> (value, holds)``, judged in ``modes``."""

    name: str
    text: str
    check: object
    modes: tuple = field(default=("quick", "full"))


def _plain(value):
    """A JSON-friendly form of a measured value (floats rounded for the table)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else str(number)


def slower_in_turns(slow, fast, share=SLOWER_SHARE):
    """``(value, holds)`` of the claim "``slow`` takes longer than ``fast``", both timed in the same
    turns: it holds when ``slow`` took longer in at least ``share`` of the turns and its lower
    quartile is the higher (:func:`.timing.paired_turns`). ``value`` reads "14/15, 1.78x" (slower
    turns / turns, ratio of lower quartiles). Claims that use it say :data:`IN_TURNS`."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
        raise ValueError(f"slower_in_turns: share must be a number in (0, 1], the least share of turns in "
                         f"which slow took longer; got {share!r}")
    t = paired_turns(slow, fast)
    return f"{t['slower']}/{t['turns']}, {t['q1_ratio']:.3g}x", t["share"] >= share and t["q1_ratio"] > 1


def evaluate(claims, records, quick):
    """One row per claim: name, text, mode, measured value, and ``holds`` (True, False, or None
    when the claim is not meant to hold at this run's sizes, or was not measured: then the row's
    ``not_measured`` gives the reason). A claim whose check raises counts
    as failed, with the error as its value: a missing record is a broken claim, not a pass."""
    mode = "quick" if quick else "full"
    rows = []
    for claim in claims:
        if records.get("skipped"):
            rows.append({"name": claim.name, "text": claim.text, "mode": mode, "value": "-", "holds": None,
                         "judged_in": list(claim.modes), "not_measured": records["skipped"]})
            continue
        try:
            value, holds = claim.check(records)
            holds = None if holds is None else bool(holds)
        except Exception as exc:  # a claim that cannot be computed has not been shown
            value, holds = f"{type(exc).__name__}: {exc}", False
        judged = mode in claim.modes
        if holds is None and judged:  # this run could not show it: the check says why
            rows.append({"name": claim.name, "text": claim.text, "mode": mode, "value": "-", "holds": None,
                         "judged_in": list(claim.modes), "not_measured": str(value)})
            continue
        rows.append({"name": claim.name, "text": claim.text, "mode": mode, "value": _plain(value),
                     "holds": holds if judged else None, "judged_in": list(claim.modes)})
    return rows


def failed(rows):
    """The rows of claims that were judged and do not hold."""
    return [r for r in rows if r["holds"] is False]


def format_value(value):
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def format_rows(rows, color=False):
    """A text table of claim rows; with ``color`` a failed claim is printed in red."""
    red, reset = ("\033[31m", "\033[0m") if color else ("", "")
    lines = []
    for r in rows:
        verdict = {True: "holds", False: "FAILS", None: f"not judged ({'/'.join(r['judged_in'])} only)"}[r["holds"]]
        if r.get("not_measured"):
            verdict = f"not measured ({r['not_measured']})"
        line = f"  {verdict:<22} {format_value(r['value']):>12}  {r['text']}"
        lines.append(f"{red}{line}{reset}" if r["holds"] is False else line)
    return "\n".join(lines)


README_BEGIN = "<!-- claims table: generated from figures/data/*.json by `tinymem figures --claims-table`; do not edit -->"
README_END = "<!-- end of the generated claims table -->"


def _verdict(row):
    if row.get("not_measured"):
        return f"not measured ({row['not_measured']})"
    if row["holds"] is None:
        return f"not judged ({'/'.join(row['judged_in'])} sizes only)"
    return "holds" if row["holds"] else "**does not hold**"


def markdown(records_by_family):
    """The README's claims table and the measured time of the run, as markdown, from
    ``{family: records}`` (the JSON files of ``figures/data``)."""
    lines = ["| family | claim | judged at | measured | verdict |", "| --- | --- | --- | --- | --- |"]
    for family, records in records_by_family.items():
        for row in records.get("claims", []):
            lines.append(f"| {family} | {row['text'].replace('|', '/')} | {'/'.join(row['judged_in'])} | "
                         f"{format_value(row['value'])} | {_verdict(row)} |")
    seconds = sum(r.get("meta", {}).get("seconds", 0.0) for r in records_by_family.values())
    machines = sorted({r.get("meta", {}).get("machine", "?") for r in records_by_family.values()})
    quick = [f for f, r in records_by_family.items() if r.get("meta", {}).get("quick")]
    lines += ["", f"The committed figures took {seconds:.0f} s ({seconds / 60:.1f} min) to compute: the sum of "
              f"the {len(records_by_family)} families' measured run times (`meta.seconds` in "
              f"`figures/data/*.json`), on {', '.join(machines)}, shared with other jobs."
              + (f" Made at quick sizes: {', '.join(quick)}." if quick else "")]
    return "\n".join(lines)


def replace_block(text, block):
    """``text`` with what lies between :data:`README_BEGIN` and :data:`README_END` replaced by
    ``block``; a text without both markers is an error (the README must say where the table goes)."""
    start, end = text.find(README_BEGIN), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError(f"the README has no generated claims block: put the lines\n{README_BEGIN}\n"
                         f"{README_END}\nwhere the table belongs, then rerun")
    return text[:start + len(README_BEGIN)] + "\n" + block + "\n" + text[end:]


def block_of(text):
    """What a README holds between the two markers (for the test that it is up to date)."""
    start, end = text.find(README_BEGIN), text.find(README_END)
    if start < 0 or end < start:
        raise ValueError("the README has no generated claims block")
    return text[start + len(README_BEGIN):end].strip("\n")
