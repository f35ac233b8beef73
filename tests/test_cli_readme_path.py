"""The README's own path: a quick sweep or bench never replaces the committed full-mode records,
the tests read the records as committed, and the command line's help says what it accepts."""
import pathlib
import subprocess
import types

import pytest

import committed
from tinymem import cli
from tinymem.benchmarks import benchmarks
from tinymem.experiments import families

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_a_quick_sweep_without_out_writes_into_a_git_ignored_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["figures", "--quick", "--only", "memory_timeline"]) == 0
    assert (tmp_path / "figures" / "quick" / "data" / "memory_timeline.json").exists()
    assert (tmp_path / "figures" / "quick" / "memory_timeline.png").exists()
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == ["quick"]  # figures/ itself untouched
    assert cli.default_out("figures/cuda", True) == "figures/cuda/quick" and cli.default_out("figures", False) == "figures"


def test_a_quick_bench_without_out_writes_into_the_same_folder(tmp_path, monkeypatch):
    fake = types.SimpleNamespace(NAME="targets", DESCRIPTION="a stand-in for the targets", run=lambda quick: {"rows": []},
                                 table_rows=lambda records: [], plot=lambda records, out: [])
    monkeypatch.setattr("tinymem.benchmarks.benchmarks", lambda: {"targets": fake})
    monkeypatch.chdir(tmp_path)
    assert cli.main(["bench", "targets", "--quick"]) == 0
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*.json")) == ["figures/quick/data/bench.json"]


@pytest.mark.parametrize("path", ["figures/quick/data/stack.json", "figures/quick/stack_waterfall.png",
                                  "figures/cuda/quick/data/stack.json"])
def test_the_quick_folders_are_git_ignored(path):
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", "--no-index", path], timeout=60)
    assert ignored.returncode == 0, f"{path} is not git-ignored: a quick run would show as changes to commit"


def test_committed_files_are_read_from_git_not_from_the_working_tree(tmp_path, monkeypatch):
    def git(*args):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True, timeout=60)
    git("init", "-q")
    (tmp_path / "figures" / "data").mkdir(parents=True)
    (tmp_path / "figures" / "data" / "stack.json").write_text('{"meta": {"quick": false}}')
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "records")
    (tmp_path / "figures" / "data" / "stack.json").write_text('{"meta": {"quick": true}}')  # a user's run
    monkeypatch.setattr(committed, "ROOT", tmp_path.resolve())
    for cached in (committed._in_git_checkout, committed.committed_bytes):
        cached.cache_clear()
    try:
        assert committed.committed_records("stack") == {"meta": {"quick": False}}
        assert committed.is_committed("figures/data/stack.json") and not committed.is_committed("figures/x.png")
    finally:
        for cached in (committed._in_git_checkout, committed.committed_bytes):
            cached.cache_clear()


def _help(*args):
    with pytest.raises(SystemExit) as done:
        cli.main([*args, "--help"])
    assert done.value.code == 0


def test_the_help_shows_no_markup_and_lists_the_names_it_accepts(capsys):
    _help()
    top = capsys.readouterr().out
    assert "``" not in top and "tinymem info | figures | bench" in top
    _help("figures")
    text = " ".join(capsys.readouterr().out.split())
    assert "figure families (for --only), in run order: " + ", ".join(families()) in text
    assert "figures/quick/" in text
    _help("bench")
    assert "benchmarks (for NAMES): " + ", ".join(benchmarks()) in " ".join(capsys.readouterr().out.split())


def test_info_says_where_the_default_device_comes_from(capsys, monkeypatch):
    monkeypatch.delenv("TINYMEM_DEVICE", raising=False)
    assert cli.main(["info"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("device"))
    assert "TINYMEM_DEVICE is unset" in line and "from TINYMEM_DEVICE" not in line
    monkeypatch.setenv("TINYMEM_DEVICE", "cpu")
    assert cli.main(["info"]) == 0
    assert "from TINYMEM_DEVICE=cpu" in capsys.readouterr().out


def test_info_names_a_bad_tinymem_device_once(capsys, monkeypatch):
    monkeypatch.setenv("TINYMEM_DEVICE", "gpu")
    assert cli.main(["info"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("device"))
    assert line.count("TINYMEM_DEVICE='gpu'") == 1 and "unknown device 'gpu'" in line, line


def test_figures_refuses_an_out_that_is_a_file_before_running_anything(tmp_path, capsys, monkeypatch):
    from tinymem import experiments
    ran = []
    monkeypatch.setattr(experiments.families()["plan"], "run", lambda **kw: ran.append(kw) or {})
    out = tmp_path / "a-file"
    out.write_text("mine")
    assert cli.main(["figures", "--quick", "--only", "plan", "--out", str(out)]) == 2
    assert f"cannot write into {out}" in capsys.readouterr().err
    assert ran == [] and out.read_text() == "mine"
