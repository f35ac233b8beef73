"""tinymem bench: the README's speed table is the one generated from figures/data/bench.json, and
the records carry what they were measured on (no timing is asserted here). Both are read as
committed (tests/committed.py): a user's own `tinymem bench` run changes neither."""
import warnings

import pytest

from committed import committed_records, committed_text
from tinymem import plots
from tinymem.benchmarks import readme, targets


def test_readme_table_matches_the_committed_records():
    records = committed_records("bench")
    text = committed_text("README.md")
    assert readme.render(text, records) == text, "README is stale: run python -m tinymem.benchmarks.readme"


def test_records_name_machine_rows_and_targets():
    records = committed_records("bench")
    assert records["meta"]["machine"] and records["meta"]["numpy"] and records["meta"]["date"]
    keys = [r["key"] for r in records["rows"]]
    assert {"mlp", "tiny_op", "adam8bit", "lion", "fp16", "bf16", "checkpoint", "offload"} <= set(keys)
    for row in records["rows"]:
        mine = row["contenders"]["tinymem"]
        assert mine["min"] <= mine["q1"] <= mine["median"] <= mine["q3"] <= mine["max"]
        assert len(mine["ratios"]) == records["rounds"]


def test_render_refuses_a_readme_without_markers():
    with pytest.raises(ValueError, match="markers"):
        readme.render("# no table here\n", {"rows": [], "rounds": 1, "clock": "", "meta": {}})


def test_plot_draws_every_row_without_layout_problems(tmp_path):
    records = committed_records("bench")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", plots.LayoutWarning)
        paths = targets.plot(records, tmp_path)
    assert paths and (tmp_path / "bench.png").stat().st_size > 10_000
    problems = [str(w.message) for w in caught if issubclass(w.category, plots.LayoutWarning)]
    assert problems == []


def _row(key, median, target=None, met=None):
    stats = {"median": median, "q1": median, "q3": median, "min": median, "max": median}
    return {"key": key, "what": key, "target": target, "met": met, "contenders": {"tinymem": stats}}


def test_a_missed_row_gets_its_measured_reason_from_the_diagnostic_rows():
    records = {"rounds": 1, "clock": "c", "meta": {}, "rows": [
        _row("fp16", 1.71, 1.5, False), _row("fp16_machinery", 1.07),
        _row("bf16", 1.19, 1.2, True),
        _row("checkpoint", 1.34, 1.31, False), _row("checkpoint_forward", 1.13), _row("linear_matmul", 1.16)]}
    lines = readme.table(records)
    reasons = lines[lines.index("Why the missed targets are missed, from the diagnostic rows of the same run:") + 1:]
    assert len(reasons) == 2  # bf16 met: no sentence for it
    assert reasons[0].startswith("- fp16:") and "1.07x" in reasons[0] and "1.71x" in reasons[0]
    assert reasons[1].startswith("- checkpoint:") and "1.13x" in reasons[1] and "1.16x" in reasons[1]


def test_a_missed_half_row_gives_its_encode_cost_in_passes_when_measured():
    rows = [_row("fp16", 1.6, 1.5, False), _row("fp16_machinery", 1.08), _row("bf16", 1.36, 1.2, False),
            _row("fp16_encode", 11.5), _row("fp16_astype", 24.9), _row("bf16_encode", 5.6)]
    lines = readme.table({"rounds": 1, "clock": "c", "meta": {}, "rows": rows})
    fp16, bf16 = (next(line for line in lines if line.startswith(f"- {key}:")) for key in ("fp16", "bf16"))
    assert "11.5 elementwise passes" in fp16 and "24.9" in fp16
    assert "5.6 elementwise passes" in bf16 and "24.9" in bf16


def test_no_reasons_block_when_every_target_is_met_or_no_diagnostic_says_why():
    met = {"rounds": 1, "clock": "c", "meta": {}, "rows": [_row("fp16", 1.4, 1.5, True), _row("fp16_machinery", 1.07)]}
    assert not any(line.startswith("Why the missed") for line in readme.table(met))
    # A miss without the row that explains it is left to the table, not given an invented reason.
    bare = {"rounds": 1, "clock": "c", "meta": {}, "rows": [_row("checkpoint", 1.34, 1.31, False)]}
    assert not any(line.startswith("Why the missed") for line in readme.table(bare))
