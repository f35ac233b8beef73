"""Claims as code: a claim is judged only at the sizes it is meant for, and a broken one fails."""
from tinymem.measure.claims import Claim, evaluate, failed, format_rows

RECORDS = {"ratio": 0.25, "speedup": 0.9}
CLAIMS = [
    Claim("small", "ratio <= 0.3", lambda r: (r["ratio"], r["ratio"] <= 0.3)),
    Claim("fast", "speedup >= 1", lambda r: (r["speedup"], r["speedup"] >= 1), modes=("full",)),
    Claim("broken", "a record that is missing", lambda r: (r["missing"], True)),
]


def test_claims_are_judged_in_their_modes_and_missing_records_fail():
    quick = {r["name"]: r for r in evaluate(CLAIMS, RECORDS, quick=True)}
    assert quick["small"]["holds"] is True and quick["small"]["value"] == 0.25
    assert quick["fast"]["holds"] is None  # a full-size claim is not judged at quick sizes
    assert quick["broken"]["holds"] is False and "KeyError" in quick["broken"]["value"]
    full = {r["name"]: r for r in evaluate(CLAIMS, RECORDS, quick=False)}
    assert full["fast"]["holds"] is False
    assert [r["name"] for r in failed(evaluate(CLAIMS, RECORDS, quick=False))] == ["fast", "broken"]


def test_failed_claims_are_red_in_a_terminal():
    text = format_rows(evaluate(CLAIMS, RECORDS, quick=False), color=True)
    assert "\033[31m" in text and "FAILS" in text and "holds" in text
    assert "\033[31m" not in format_rows(evaluate(CLAIMS[:1], RECORDS, quick=False), color=True)


def test_a_run_that_could_not_measure_judges_no_claim_and_says_why():
    rows = evaluate(CLAIMS, {"skipped": "mpi4py or mpiexec missing"}, quick=False)
    assert failed(rows) == [] and all(r["holds"] is None for r in rows)
    assert all(r["not_measured"] == "mpi4py or mpiexec missing" for r in rows)
    assert format_rows(rows).count("not measured (mpi4py or mpiexec missing)") == len(CLAIMS)
    assert "not_measured" not in evaluate(CLAIMS, RECORDS, quick=False)[0]
