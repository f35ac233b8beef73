import json
import os

import pytest

from tinymem import backend, cli


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


def test_info_finishes_its_report_when_the_default_device_cannot_be_used(capsys, monkeypatch):
    monkeypatch.setenv("TINYMEM_DEVICE", "cuda" if not backend.cuda_available() else "tpu")
    assert cli.main(["info"]) == 0
    out = capsys.readouterr().out
    assert "cannot be used" in out and "torch" in out and "mpi4py" in out


@pytest.mark.parametrize("args, message", [
    (["--optimizers", "Bogus"], "unknown optimizer 'Bogus'"),
    (["--precisions", "fp8"], "unknown precision 'fp8'"),
    (["--offloads", "tape"], "unknown offload 'tape'"),
    (["--schedules", "every"], "unknown checkpoint schedule 'every'"),
    (["--sizes", "8,0,4"], "sizes must all be >= 1, got 0"),
    (["--sizes", "8,x,4"], "sizes must be integers"),
    (["--budget", "1.2.3MB"], "cannot read '1.2.3MB' as a size"),
    (["--budget", "-1"], "cannot read '-1' as a size"),
    (["--budget", "nan"], "cannot read 'nan' as a size"),
    (["--budget", "inf"], "cannot read 'inf' as a size"),
])
def test_plan_explains_bad_arguments_without_a_traceback(capsys, args, message):
    options = dict({"--model": "mlp", "--sizes": "8,16,4", "--batch": "4"}, **dict([args]))
    assert cli.main(["plan"] + [f"{flag}={value}" for flag, value in options.items()]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tinymem plan:") and message in err, err


@pytest.mark.parametrize("args,message", [
    (["--layers", "2", "--hidden", "64", "--heads", "4", "--seq", "16", "--vocab", "100", "--ffn", "-4"],
     "ffn must be a positive integer"),
    (["--layers", "0", "--hidden", "64", "--heads", "4", "--seq", "16", "--vocab", "100"],
     "layers must be a positive integer"),
    (["--arch", "gpt2", "--seq", "0"], "seq must be a positive integer"),  # 0 used to mean "not given"
    (["--arch", "gpt2", "--batch", "0"], "--batch must be a whole number >= 1"),
    (["--arch", "gpt2", "--micro-batches", "0"], "--micro-batches must be a whole number >= 1"),
    (["--arch", "gpt2", "--ffn", "-8"], "gpt2 overridden by --ffn -8: ffn must be a positive integer"),
    (["--model", "mlp", "--sizes", "4,8,2", "--batch", "0"], "--batch must be a whole number >= 1"),
])
def test_plan_refuses_zero_and_negative_sizes_instead_of_reading_them_as_not_given(capsys, args, message):
    assert cli.main(["plan"] + args) == 2
    err = capsys.readouterr().err
    assert err.startswith("tinymem plan:") and message in err, err


def test_monitor_checks_its_arguments_before_starting_the_command(tmp_path, capsys):
    marker = tmp_path / "ran"
    assert cli.main(["monitor", "--interval", "-1", "--", "touch", str(marker)]) == 2
    err = capsys.readouterr().err
    assert "--interval" in err and "must be a positive number of seconds" in err and not marker.exists()
    blocked = tmp_path / "file"
    blocked.write_text("a file where a folder should be")
    assert cli.main(["monitor", "--out", str(blocked / "x" / "out"), "--", "touch", str(marker)]) == 2
    assert "cannot write into" in capsys.readouterr().err and not marker.exists()
    assert cli.main(["bench", "--quick", "targets", "--out", str(blocked / "figs")]) == 2
    assert "tinymem bench: cannot write into" in capsys.readouterr().err
