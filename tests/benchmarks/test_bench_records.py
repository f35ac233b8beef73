"""tinymem bench: the README's speed table is the one generated from figures/data/bench.json, and
the records carry what they were measured on (no timing is asserted here)."""
import pathlib
import warnings

import pytest

from tinymem import plots
from tinymem.benchmarks import readme, targets
from tinymem.measure.records import read_records

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_readme_table_matches_the_committed_records():
    records = read_records(ROOT / "figures", "bench")
    text = (ROOT / "README.md").read_text()
    assert readme.render(text, records) == text, "README is stale: run python -m tinymem.benchmarks.readme"


def test_records_name_machine_rows_and_targets():
    records = read_records(ROOT / "figures", "bench")
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
    records = read_records(ROOT / "figures", "bench")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", plots.LayoutWarning)
        paths = targets.plot(records, tmp_path)
    assert paths and (tmp_path / "bench.png").stat().st_size > 10_000
    problems = [str(w.message) for w in caught if issubclass(w.category, plots.LayoutWarning)]
    assert problems == []
