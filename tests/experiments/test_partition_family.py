"""The partition family's own arithmetic: timing statistics and claims, on made-up records (no MPI)."""
import numpy as np
import pytest

from tinymem.experiments import partition
from tinymem.measure import claims


def timing_row(kind, nbytes, mpi, ring):
    return {"kind": kind, "numel": nbytes // 4, "bytes": nbytes, "calls_per_sample": 5,
            "seconds": {"mpi": list(mpi), "ring": list(ring)}}


def test_timing_summary_separates_only_beyond_three_iqrs():
    rng = np.random.default_rng(0)
    base = 1e-5 * (1 + 0.1 * rng.random(100))  # IQR about 5e-7
    far = partition.timing_summary({"rows": [timing_row("all_reduce", 64, base, 3 * base)]})["rows"][0]
    near = partition.timing_summary({"rows": [timing_row("all_reduce", 64, base, base * 1.01)]})["rows"][0]
    assert far["separated"] and far["ratio"] == pytest.approx(3, rel=1e-9)
    assert not near["separated"]
    q1, median, q3 = np.percentile(base, [25, 50, 75])
    assert far["stats"]["mpi"] == pytest.approx({"q1": q1, "median": median, "q3": q3})


def strategy_record(name, rank, sent, formula, textbook):
    return {"strategy": name, "rank": rank, "sent": sent, "received": sent, "formula_sent": formula,
            "textbook_sent": textbook, "optimizer_state_bytes": 1,
            "at_backward_end": {"parameter": 1, "gradient": 1, "optimizer": 1},
            "max_by_bucket": {"activation": 1}}


def test_the_bytes_claim_fails_when_the_measurement_departs_from_the_formula():
    """The claim compares two independent numbers: a ring that sent one block too many fails it."""
    good = [strategy_record(s, r, 1000, 1000, 1000) for s in ("dp", "zero1", "zero2", "zero3") for r in range(2)]
    bad = [dict(good[0], sent=1250)] + good[1:]
    claim = next(c for c in partition.CLAIMS if c.name == "ring_bytes_measured_equal_formula")
    rows = claims.evaluate([claim], {"runs": {"2": {"records": good}}}, quick=True)
    assert rows[0]["holds"] is True and rows[0]["value"] == 0
    rows = claims.evaluate([claim], {"runs": {"2": {"records": bad}}}, quick=True)
    assert rows[0]["holds"] is False and rows[0]["value"] == 250
