"""``tinymem timeline``: a workload's step or a script as a page and a snapshot; bad input is
refused before anything runs, and a step that raises leaves no file behind."""
import json
import os
import pickle
import re
import sys

import pytest

from tinymem import cli, optim

SCRIPT = """
import numpy as np
import tinymem as tm
import tinymem.functional as F
model = tm.models.MLP([8, 16, 2])
loss = F.cross_entropy(model(tm.tensor(np.ones((4, 8), np.float32))), np.array([0, 1, 0, 1]))
loss.backward()
{tail}
"""


def _page_numbers(path):
    text = path.read_text()
    return json.loads(re.search(r"const DATA = (\{.*?\});\n", text, re.S).group(1))


def test_a_workload_step_writes_the_page_and_the_snapshot(tmp_path, capsys):
    page, snap = tmp_path / "step.html", tmp_path / "step.pickle"
    code = cli.main(["timeline", "--workload", "mlp", "--sizes", "16,32,4", "--batch", "4",
                     "--out", str(page), "--snapshot", str(snap)])
    assert code == 0
    peak = int(re.search(r"peak ([\d,]+) B", capsys.readouterr().out).group(1).replace(",", ""))
    numbers = _page_numbers(page)
    assert numbers["peak"]["bytes"] == peak > 0
    assert [label for _, label in numbers["marks"]] == ["forward", "backward", "optimizer"]
    with open(snap, "rb") as f:
        trace = pickle.load(f)["device_traces"][0]
    assert {e["action"] for e in trace} == {"alloc", "free_requested", "free_completed"}


def test_a_script_runs_in_the_window_and_its_lines_are_named(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tail=""))
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == 0
    details = _page_numbers(page)["details"]
    assert any("train.py:7" in d for d in details)  # the backward line made the gradients


def test_a_script_that_raises_halfway_has_its_page_up_to_the_failure(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tail="raise RuntimeError('diverged')"))
    out = tmp_path / "out"
    out.mkdir()
    assert cli.main(["timeline", "--out", str(out / "run.html"), "--snapshot", str(out / "run.pickle"),
                     "--", "python", str(script)]) == 1
    err = capsys.readouterr().err
    assert f'File "{script}", line 8, in <module>' in err and "RuntimeError: diverged" in err
    assert "the script raised RuntimeError: exit status 1, as under python; its page shows memory up to then" in err
    assert sorted(os.listdir(out)) == ["run.html", "run.pickle"]
    numbers = _page_numbers(out / "run.html")
    assert numbers["peak"]["bytes"] > 0 and any("train.py:7" in d for d in numbers["details"])


def test_bad_input_is_refused_before_the_step(tmp_path, capsys):
    missing = tmp_path / "nope" / "step.html"
    assert cli.main(["timeline", "--out", str(missing)]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert cli.main(["timeline", "--workload", "mlp", "--out", str(tmp_path / "a.html"), "--", "x.py"]) == 2
    assert "not both" in capsys.readouterr().err
    assert cli.main(["timeline", "--workload", "resnet", "--out", str(tmp_path / "a.html")]) == 2
    assert "unknown workload 'resnet'" in capsys.readouterr().err
    assert cli.main(["timeline", "--out", str(tmp_path / "a.html"), "--", "python", "train.sh"]) == 2
    assert "give a Python script" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("argv,said", [
    (["--workload", "transformer", "--sizes", "64,32,30,4,2"], "embed_dim (30) must be divisible by num_heads (4)"),
    (["--workload", "mlp", "--sizes", ""], "mlp sizes need an input and an output size"),
    (["--workload", "unet", "--sizes", "1,4,8,3,7"], "unet resolution 7 must be divisible by 2**(depth-1) = 4"),
    (["--workload", "", "--sizes", "4,4"], "unknown workload ''"),
])
def test_sizes_no_model_can_have_and_empty_values_are_refused_before_the_step(tmp_path, capsys, argv, said):
    # Before, a model the sizes could not build raised out of the command (a traceback through
    # tinymem, exit 1), and an empty --sizes or --workload silently meant the default one.
    assert cli.main(["timeline", *argv, "--out", str(tmp_path / "a.html")]) == 2
    assert f"tinymem timeline: {said}" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
    assert cli.main(["timeline", "--workload", "mlp", "--sizes", "4,4", "--out", str(tmp_path / "a.html")]) == 0
    assert os.listdir(tmp_path) == ["a.html"]


def test_the_memory_timeline_family_writes_its_page_beside_the_png(tmp_path):
    assert cli.main(["figures", "--quick", "--only", "memory_timeline", "--out", str(tmp_path)]) == 0
    records = json.loads((tmp_path / "data" / "memory_timeline.json").read_text())
    numbers = _page_numbers(tmp_path / "memory_timeline.html")
    assert numbers["peak"]["bytes"] == records["peak"] > 0
    assert [label for _, label in numbers["marks"]] == [
        "step 1: forward", "backward", "optimizer", "step 2: forward", "backward", "optimizer"]
    os.remove(tmp_path / "memory_timeline.html")  # --replot draws it again from the records alone
    assert cli.main(["figures", "--replot", "--only", "memory_timeline", "--out", str(tmp_path)]) == 0
    assert _page_numbers(tmp_path / "memory_timeline.html") == numbers


def test_a_script_that_ends_with_sys_exit_0_is_written_and_a_failing_status_is_passed_on(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tail="import sys\nsys.exit(0)"))
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == 0
    assert _page_numbers(page)["peak"]["bytes"] > 0
    assert capsys.readouterr().err == ""
    os.remove(page)
    script.write_text(SCRIPT.format(tail="import sys\nsys.exit(3)"))
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == 3
    assert "the script called sys.exit(3): exit status 3, as under python" in capsys.readouterr().err
    assert _page_numbers(page)["peak"]["bytes"] > 0


def test_a_value_error_of_the_script_is_its_failure_not_a_refused_argument(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(tail="raise ValueError('bad learning rate')"))
    assert cli.main(["timeline", "--out", str(tmp_path / "run.html"), "--", "python", str(script)]) == 1
    err = capsys.readouterr().err
    assert "ValueError: bad learning rate" in err and "raised ValueError: exit status 1" in err


def test_dash_dash_without_a_script_and_a_folder_as_snapshot_are_refused_before_the_step(tmp_path, capsys):
    page = tmp_path / "a.html"
    assert cli.main(["timeline", "--out", str(page), "--"]) == 2
    assert "nothing after --" in capsys.readouterr().err
    folder = tmp_path / "snap"
    folder.mkdir()
    assert cli.main(["timeline", "--workload", "mlp", "--sizes", "4,8,2", "--out", str(page),
                     "--snapshot", str(folder)]) == 2
    assert "is a folder" in capsys.readouterr().err
    assert cli.main(["timeline", "--workload", "mlp", "--sizes", "4,8,2", "--out", str(page),
                     "--snapshot", str(page)]) == 2
    assert "the same file" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["snap"] and os.listdir(folder) == []


def test_a_script_imports_a_module_beside_it_as_under_python(tmp_path):
    (tmp_path / "helper_for_timeline.py").write_text("import numpy as np\nimport tinymem as tm\n"
                                                     "def make():\n    return tm.tensor(np.ones(64, np.float32))\n")
    script = tmp_path / "train.py"
    script.write_text("import helper_for_timeline\nx = helper_for_timeline.make()\n")
    path = list(sys.path)
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == 0
    assert _page_numbers(page)["peak"]["bytes"] >= 256
    assert sys.path == path


def test_a_workload_step_that_raises_has_its_page_and_traceback(tmp_path, capsys, monkeypatch):
    def diverges(self):
        raise FloatingPointError("the update diverged")

    monkeypatch.setattr(optim.Adam, "step", diverges)
    page = tmp_path / "step.html"
    assert cli.main(["timeline", "--workload", "mlp", "--sizes", "16,32,4", "--batch", "4", "--out", str(page)]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "FloatingPointError: the update diverged" in err
    assert "the step raised FloatingPointError: exit status 1; its page shows memory up to then" in err
    numbers = _page_numbers(page)
    assert [label for _, label in numbers["marks"]] == ["forward", "backward"] and numbers["peak"]["bytes"] > 0
