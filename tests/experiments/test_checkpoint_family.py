"""checkpoint's selective_time claim on made-up records: selective's overhead over full
recomputation's, by lower quartiles, judged only when full recomputation cost time at all."""
from tinymem.experiments import checkpoint
from tinymem.measure import claims


def records(none, full, selective):
    rows = [{"strategy": s, "memory_ratio": m, "step": {"q1": q1}}
            for s, m, q1 in (("none", 1.0, none), ("full recompute", 0.1, full), ("selective", 0.4, selective))]
    return {"models": {"transformer": {"rows": rows}}}


def selective_time(recs):
    return next(r for r in claims.evaluate(checkpoint.CLAIMS, recs, quick=False) if r["name"] == "selective_time")


def test_selective_time_shows_its_share_of_fulls_overhead():
    row = selective_time(records(none=0.60, full=0.80, selective=0.65))
    assert row["holds"] is True and abs(row["value"] - 0.25) < 1e-12
    assert selective_time(records(none=0.60, full=0.80, selective=0.85))["holds"] is False


def test_selective_time_is_not_measured_when_full_recomputation_cost_nothing():
    """Before, a full recomputation no slower than none (noise) divided by 1e-12: a selective step
    also no slower gave a share of -5e10 and the claim held; now the row says why it was not shown."""
    row = selective_time(records(none=0.60, full=0.59, selective=0.55))
    assert row["holds"] is None and row["value"] == "-"
    assert row["not_measured"].startswith("full recomputation showed no overhead in this run")
    assert "-10 ms" in row["not_measured"]
