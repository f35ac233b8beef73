import json
import os

from tinymem import cli


def test_info_reports_versions(capsys):
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "tinymem" in out and "numpy" in out and "torch" in out


def test_figures_quick_writes_the_timeline_figure_and_its_records(tmp_path):
    assert cli.main(["figures", "--quick", "--only", "memory_timeline", "--out", str(tmp_path)]) == 0
    assert os.path.getsize(tmp_path / "memory_timeline.png") > 10_000
    records = json.loads((tmp_path / "data" / "memory_timeline.json").read_text())
    kinds = {e["kind"] for e in records["timeline"]}
    assert {"alloc", "free", "mark"} <= kinds
    assert records["meta"]["quick"] is True and records["meta"]["machine"]
    assert records["peak"] == max(sum(e["live"].values()) for e in records["timeline"])


def test_unknown_family_is_refused(capsys):
    assert cli.main(["figures", "--only", "nope"]) == 2
    assert "unknown figure family" in capsys.readouterr().err
