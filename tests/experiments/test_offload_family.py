"""The offload family's claims on made-up records: turn by turn and by lower quartiles, so one
noisy mode does not fail them, and the bytes claim counts what each mode moved."""
from tinymem.experiments import offload
from tinymem.measure import claims

# The clean-clone run: the plain step varied 0.084-0.139 s (IQR 38% of its median).
NONE = [0.118, 0.084, 0.133, 0.090, 0.125, 0.086, 0.139, 0.095, 0.105, 0.137, 0.088, 0.130, 0.092, 0.135, 0.100]


def mode(name, samples, stalls, moved=1000):
    return {"mode": name, "samples": samples, "stall_samples": stalls, "bytes_out": moved if name != "none" else 0,
            "bytes_in": moved if name.startswith("disk") else 0}


def records(host_moved=1000):
    disk = [0.17 + 0.001 * i for i in range(15)]
    return {"modes": [mode("none", NONE, [0.0] * 15), mode("host", [t + 0.002 for t in NONE], [0.0] * 15, host_moved),
                      mode("disk", disk, [0.06 + 0.001 * i for i in range(15)]),
                      mode("disk+prefetch", [t - 0.03 for t in disk], [0.01 + 0.001 * i for i in range(15)])]}


def judged(recs):
    return {r["name"]: r for r in claims.evaluate(offload.CLAIMS, recs, quick=False)
            if r["name"] not in ("offload_lowers_peak", "streaming_two_layers", "disk_as_predicted")}


def test_time_claims_hold_when_the_plain_step_is_noisy():
    rows = judged(records())
    assert {name: r["holds"] for name, r in rows.items()} == {
        "same_bytes_moved": True, "disk_costs_time": True, "host_cheaper_than_disk": True,
        "prefetch_not_faster_than_none": True, "prefetch_hides_io": True, "prefetch_faster": True}
    assert rows["disk_costs_time"]["value"].startswith("15/15, ")
    assert rows["same_bytes_moved"]["value"] == 1000 / 1e6


def test_the_bytes_claim_fails_when_a_mode_moves_other_bytes():
    assert judged(records(host_moved=999))["same_bytes_moved"]["holds"] is False


def test_prefetch_shown_faster_than_no_offload_fails_its_claim():
    """Prefetch cannot beat doing no I/O: a run in which it did, turn after turn, has a bug."""
    recs = records()
    recs["modes"][3]["samples"] = [t - 0.01 for t in NONE]
    assert judged(recs)["prefetch_not_faster_than_none"]["holds"] is False
    assert judged(records())["prefetch_not_faster_than_none"]["holds"] is True


def test_the_prediction_is_judged_only_when_the_step_had_a_core():
    """An I/O thread that waits for a core writes slower than the run's best bandwidth: then the
    claim says the machine was too busy, rather than failing or passing."""
    claim = [c for c in offload.CLAIMS if c.name == "disk_as_predicted"]
    busy = claims.evaluate(claim, {"targets": {"core_share": 0.39, "disk_over_predicted": 1.31}}, quick=False)[0]
    assert busy["holds"] is None and "got 39% of a core" in busy["not_measured"]
    idle = claims.evaluate(claim, {"targets": {"core_share": 0.99, "disk_over_predicted": 1.11}}, quick=False)[0]
    assert idle["holds"] is True and idle["value"] == 1.11
    slow = claims.evaluate(claim, {"targets": {"core_share": 0.99, "disk_over_predicted": 1.31}}, quick=False)[0]
    assert slow["holds"] is False
