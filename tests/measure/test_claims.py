"""Claims as code: a claim is judged only at the sizes it is meant for, and a broken one fails;
a slowdown is judged turn by turn and by lower quartiles, which scheduler noise cannot fake."""
import numpy as np
import pytest

from tinymem.measure.claims import Claim, evaluate, failed, format_rows, slower_in_turns

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


def test_a_real_slowdown_holds_though_noise_widens_one_sides_quartiles():
    """The issue's clean-clone run: the plain step varied 0.084-0.139 s (IQR 38% of its median),
    the disk step 1.8x as slow. The difference of medians over the wider IQR came to about 2 (the
    claim asked 3); turn by turn the disk step is the slower every time."""
    plain = [0.118, 0.084, 0.133, 0.090, 0.125, 0.086, 0.139, 0.095, 0.105, 0.137, 0.088, 0.130, 0.092,
             0.135, 0.100]
    disk = [0.152, 0.155, 0.151, 0.160, 0.153, 0.158, 0.154, 0.170, 0.152, 0.156, 0.165, 0.153, 0.157,
            0.151, 0.159]
    q1, median, q3 = np.percentile(plain, [25, 50, 75])
    assert (q3 - q1) / median > 0.38  # as noisy as the plain step
    assert (np.median(disk) - median) / (q3 - q1) < 3  # the old "3 spreads" test fails it
    value, holds = slower_in_turns(disk, plain)
    assert holds and value == f"15/15, {np.percentile(disk, 25) / q1:.3g}x"


def test_noise_alone_does_not_make_a_slowdown():
    rng = np.random.default_rng(4)  # one cost, and preemptions that only add time
    a, b = 0.1 + rng.exponential(0.03, 15), 0.1 + rng.exponential(0.03, 15)
    assert not slower_in_turns(a, b)[1] and not slower_in_turns(b, a)[1]
    # slower in 3 of 5 turns: short of 80%, whatever the lower quartiles
    assert slower_in_turns([2, 2, 2, 1, 1], [1, 1, 1, 2, 2]) == ("3/5, 1x", False)
    assert slower_in_turns([2, 2, 2, 1, 3], [1, 1, 1, 2, 1]) == ("4/5, 2x", True)


def test_a_run_that_cannot_show_a_claim_says_why_instead_of_failing_it():
    busy = Claim("busy", "needs a core", lambda r: ("the machine was too busy", None) if r["busy"] else (1.1, True),
                 modes=("full",))
    row = evaluate([busy], {"busy": True}, quick=False)[0]
    assert row["holds"] is None and row["not_measured"] == "the machine was too busy" and failed([row]) == []
    assert "not measured (the machine was too busy)" in format_rows([row])
    assert evaluate([busy], {"busy": False}, quick=False)[0]["holds"] is True
    assert "not_measured" not in evaluate([busy], {"busy": True}, quick=True)[0]  # not judged at quick sizes


@pytest.mark.parametrize("share", [0, -0.5, 1.5, float("nan"), "0.8", None, True])
def test_slower_in_turns_refuses_a_share_outside_0_to_1_by_name(share):
    """Before, share=0 or -0.5 claimed "slower" whatever the turns, 1.5 or NaN never did, and "0.8"
    raised a bare TypeError."""
    with pytest.raises(ValueError, match=r"share must be a number in \(0, 1\]"):
        slower_in_turns([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], share=share)
    assert slower_in_turns([2.0, 2.0, 2.0], [1.0, 1.0, 1.0], share=1) == ("3/3, 2x", True)
