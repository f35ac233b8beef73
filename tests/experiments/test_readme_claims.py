"""The README's claims table and the measured time of the figure run are generated from the
committed records (`tinymem figures --claims-table --readme README.md`), never typed. README and
records are read as committed (tests/committed.py): a user's own `tinymem figures` run, which
rewrites figures/, changes neither."""
import json

from committed import committed_records, committed_text
from tinymem import cli
from tinymem.experiments import families
from tinymem.measure import claims
from tinymem.measure.records import read_records



def test_readme_claims_table_is_generated_from_the_committed_records():
    readme = committed_text("README.md")
    records = {name: committed_records(name) for name in families()}
    expected = claims.markdown(records)
    assert claims.block_of(readme) == expected, (
        "README's claims table is out of date: run `tinymem figures --claims-table --readme README.md`")
    seconds = sum(r["meta"]["seconds"] for r in records.values())
    assert f"took {seconds:.0f} s" in claims.block_of(readme)


def test_claims_table_option_writes_between_the_markers(tmp_path, capsys):
    readme = tmp_path / "README.md"
    readme.write_text(f"# title\n\n{claims.README_BEGIN}\nold table\n{claims.README_END}\n\nafter\n")
    figures_dir = tmp_path / "figures"
    (figures_dir / "data").mkdir(parents=True)
    (figures_dir / "data" / "stack.json").write_text(committed_text("figures/data/stack.json"))
    figures_dir = str(figures_dir)
    assert cli.main(["figures", "--claims-table", "--out", figures_dir, "--only", "stack",
                     "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert "old table" not in text and text.endswith("\n\nafter\n") and text.startswith("# title\n\n")
    assert claims.block_of(text) == claims.markdown({"stack": read_records(figures_dir, "stack")})
    readme.write_text("no markers here\n")
    assert cli.main(["figures", "--claims-table", "--out", figures_dir, "--only", "stack", "--readme", str(readme)]) == 2
    assert "no generated claims block" in capsys.readouterr().err
    assert readme.read_text() == "no markers here\n"


def test_markdown_table_marks_each_verdict():
    rows = [{"name": "a", "text": "x <= 1 | y", "mode": "full", "value": 0.5, "holds": True, "judged_in": ["full"]},
            {"name": "b", "text": "fast", "mode": "full", "value": 2.0, "holds": False, "judged_in": ["full"]},
            {"name": "c", "text": "quick one", "mode": "full", "value": 1, "holds": None, "judged_in": ["quick"]}]
    text = claims.markdown({"fam": {"claims": rows, "meta": {"seconds": 61.4, "machine": "m", "quick": False}}})
    lines = text.splitlines()
    assert lines[2] == "| fam | x <= 1 / y | full | 0.5 | holds |"  # a '|' in a claim would break the table
    assert "**does not hold**" in lines[3] and "not judged (quick sizes only)" in lines[4]
    assert "took 61 s (1.0 min)" in text and "on m" in text


def test_replot_redraws_from_the_records_and_judges_the_claims_again(tmp_path):
    (tmp_path / "data").mkdir()
    records = committed_records("stack")
    records["claims"] = []  # as if the claims were added after the sweep
    records["reduction"] = 1.0  # and the sweep had found no reduction: the claim must now fail
    claims_before = claims.evaluate(families()["stack"].CLAIMS, records, quick=False)
    (tmp_path / "data" / "stack.json").write_text(json.dumps(records))
    assert cli.main(["figures", "--replot", "--only", "stack", "--out", str(tmp_path)]) == 0
    assert cli.main(["figures", "--replot", "--only", "stack", "--out", str(tmp_path), "--strict"]) == 1
    written = read_records(str(tmp_path), "stack")
    assert written["claims"] == json.loads(json.dumps(claims_before))
    assert any(r["name"] == "stacked_reduction" and r["holds"] is False for r in written["claims"])
    assert written["meta"] == records["meta"]  # the measurement's machine and date, not today's
    assert (tmp_path / "stack_waterfall.png").stat().st_size > 10_000


def test_a_claim_the_run_could_not_measure_is_listed_at_the_end_and_strict_passes_it(tmp_path, capsys):
    """A run too busy to judge offload's disk_as_predicted (the committed records with the plain
    step given 14% of a core, as a loaded run measured): --strict exits 0 (not a failure, as the
    README says) and the run's last lines name it with its reason; before, it was only in
    offload's table, which the later families' output scrolls away."""
    (tmp_path / "data").mkdir()
    records = json.loads(committed_text("figures/data/offload.json"))
    records["targets"]["core_share"] = 0.14
    (tmp_path / "data" / "offload.json").write_text(json.dumps(records))
    assert cli.main(["figures", "--replot", "--only", "offload", "--out", str(tmp_path), "--strict"]) == 0
    rows = [r for r in read_records(str(tmp_path), "offload")["claims"] if r.get("not_measured")]
    assert [r["name"] for r in rows] == ["disk_as_predicted"]
    end = capsys.readouterr().err.split("1 claim(s) not measured by this run (not failures; --strict passes them):")
    assert len(end) == 2 and f"offload: {rows[0]['text']} ({rows[0]['not_measured']})" in end[1]
