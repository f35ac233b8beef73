"""``tinymem figures`` on a device the CPU-only families refuse: they are skipped with their
reason, a family that raises is reported and the sweep goes on to the next, and the exit
status says something failed."""
import json
import types

import pytest

from tinymem import cli, experiments
from tinymem.experiments import edge, rl


def _family(name, order, run):
    def plot(records, outdir):
        return []
    return types.SimpleNamespace(NAME=name, ORDER=order, FIGURES=[], run=run, plot=plot, CLAIMS=[])


def _ok(quick, device):
    return {"device": device}


def _broken(quick, device):
    raise RuntimeError("planted failure in one family")


@pytest.fixture
def fake_families(monkeypatch):
    found = {"first": _family("first", 1, _ok), "rl": rl, "broken": _family("broken", 3, _broken),
             "edge": edge, "last": _family("last", 5, _ok)}
    monkeypatch.setattr(experiments, "families", lambda: found)
    return found


def test_the_cuda_sweep_skips_cpu_only_families_and_goes_past_a_failing_one(fake_families, standin, tmp_path, capsys):
    code = cli.main(["figures", "--quick", "--device", "cuda", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    for name in ("rl", "edge"):
        assert f"figure family {name} skipped on cuda: it runs on the CPU only" in err
        assert experiments.CPU_ONLY_FAMILIES[name] in err
    assert "planted failure in one family" in err and "1 figure family failed (traceback above): broken" in err
    for name in ("first", "last"):  # the family after the failure ran too
        assert json.loads((tmp_path / "data" / f"{name}.json").read_text())["device"] == "cuda"
    assert not (tmp_path / "data" / "broken.json").exists()


def test_only_cpu_only_families_on_cuda_is_refused_with_the_way_out(fake_families, standin, tmp_path, capsys):
    assert cli.main(["figures", "--quick", "--only", "rl", "--device", "cuda", "--out", str(tmp_path)]) == 2
    assert "use --device cpu" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(experiments.CPU_ONLY_FAMILIES))
def test_each_cpu_only_family_refuses_cuda_with_the_reason_listed(name, standin):
    module = experiments.families()[name]
    with pytest.raises(ValueError) as refused:
        module.run(quick=True, device="cuda")
    assert experiments.CPU_ONLY_FAMILIES[name] in str(refused.value)


def test_a_family_named_twice_runs_once_and_a_corrupt_earlier_record_stops_nothing(fake_families, standin,
                                                                                   tmp_path, capsys):
    """``--only first first`` ran (on a GPU: measured) the family twice; a records file of valid
    JSON but another shape stopped the sweep before its first family."""
    runs = []
    fake_families["first"].run = lambda quick, device: runs.append(device) or {"device": device}
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "last.json").write_text("[]")
    code = cli.main(["figures", "--quick", "--only", "first", "last", "first", "--device", "cuda",
                     "--out", str(tmp_path)])
    assert code == 0, capsys.readouterr().err
    assert runs == ["cuda"]
    assert json.loads((tmp_path / "data" / "last.json").read_text())["device"] == "cuda"
