"""How long a figure run has left: each family's last measured time, scaled by this run's pace.

``tinymem figures`` runs families one after another; the JSON each wrote last time holds how
long it took (``meta.seconds``). Before each family the command prints the time left: the
remaining families' last times, multiplied by how this run's finished families compared with
theirs (a busier machine runs slower throughout). Memory and time: negligible.
"""
import json
import os


def last_seconds(outdir, name, quick):
    """Seconds the last run of family ``name`` in ``outdir`` took at the same sizes, or None."""
    try:
        with open(os.path.join(outdir, "data", f"{name}.json")) as f:
            records = json.load(f)
    except (OSError, ValueError):
        return None
    # Only an estimate: a file of another shape (a list, a meta that is no dict, seconds that
    # are no positive number) means "unknown", not an error that stops the whole sweep.
    meta = records.get("meta") if isinstance(records, dict) else None
    if not isinstance(meta, dict) or meta.get("quick") != quick:
        return None
    seconds = meta.get("seconds")
    ok = isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and 0 < seconds < float("inf")
    return seconds if ok else None


def seconds_left(remaining, done):
    """Estimated seconds for the families still to run. ``remaining``: their last times (None
    when a family has none: it counts as the average of the known ones); ``done``: ``(measured,
    last)`` pairs of the families this run finished. None when nothing is known."""
    known = [s for s in remaining if s is not None]
    if not known:
        return None
    total = sum(known) + (len(remaining) - len(known)) * sum(known) / len(known)
    paired = [(m, s) for m, s in done if s]
    pace = sum(m for m, _ in paired) / sum(s for _, s in paired) if paired else 1.0
    return total * pace


def describe(index, count, name, last, left):
    """One progress line: ``[3/15] rl (last run 1783 s); about 42 min left``."""
    when = f"last run {last:.0f} s" if last is not None else "no earlier run"
    rest = f"about {left / 60:.1f} min left" if left is not None else "time left unknown"
    return f"[{index}/{count}] {name} ({when}); {rest}"
