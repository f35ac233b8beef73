"""The optimizers figure family on a tiny configuration: its records keep their promises
(ledger = formula = state_bytes, the tuned lr is the sweep's best, 8-bit reuses Adam's lr) and
the figures are drawn from the records alone."""
import json
import os

import pytest

from tinymem.experiments import optimizers as experiment


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(experiment, "_setup", lambda quick: {
        "sizes": [64, 16, 10], "batch": 256, "epochs": 1, "lrs_per_optimizer": 2})
    return experiment.run(quick=True)


def test_records_and_figures(tiny, tmp_path):
    records = json.loads(json.dumps(tiny))  # what the JSON file holds
    for m in records["memory"]:
        assert m["ledger_optimizer_bytes"] == m["formula_bytes"] == m["state_bytes"], m["label"]
    for label, tuned in records["tuned"].items():
        runs = [r for r in records["runs"] if r["label"] == label]
        if label in experiment.SAME_RUN_AS_ADAM:
            assert tuned["lr"] == records["tuned"]["Adam"]["lr"]
            continue
        assert len(runs) == 2
        finite = [r["final_heldout"] for r in runs if r["final_heldout"] is not None]
        assert tuned["final_heldout"] == min(finite)
    assert 0 < records["targets"]["adafactor_matrix_state_ratio"] < 0.2
    records["meta"] = {"machine": "test", "quick": True}
    paths = experiment.plot(records, str(tmp_path))
    assert [os.path.basename(p) for p in paths] == experiment.FIGURES
    assert all(os.path.getsize(p) > 10_000 for p in paths)
