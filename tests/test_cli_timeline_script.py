"""``tinymem timeline -- python script.py``: the script ends as under ``python`` (its exit status,
its traceback, checked against a real ``python``), the outputs land where they were asked for
even if it changes folder, and no output may replace a file the command reads."""
import os
import re
import subprocess
import sys

import pytest

from tinymem import cli
from tinymem.memory import page as page_module

MAKES_AN_ARRAY = "import numpy as np\nimport tinymem as tm\nx = tm.tensor(np.ones(64, np.float32))\n"


def _peak_above_entry(page):
    """The page's peak less the bytes already alive when the window opened: the script's own
    64-float array, whatever earlier tests in this process left alive."""
    text = page.read_text()
    entered = int(re.search(r'"entered":(\d+)', text).group(1))
    return int(re.search(r'"peak":\{"bytes":(\d+)', text).group(1)) - entered


def _python(script, cwd):
    """What a real ``python script`` (this tinymem importable) exits with and prints on stderr."""
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(cli.__file__)))
    done = subprocess.run([sys.executable, str(script)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stderr


def _files(folder):
    """Every file under ``folder`` with its bytes and modification time: what a refusal must keep."""
    return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("code", ["", "None", "0", "3", "256", "-1", "2**40", "2**63", "True", "0.0",
                                  "'no data'", "[1, 2]"])
def test_the_exit_status_and_what_is_printed_are_pythons(tmp_path, capsys, code):
    # The rules, from a real python: `python -c 'import sys; sys.exit(256)'` exits 0 in a shell.
    done = subprocess.run([sys.executable, "-c", f"import sys; sys.exit({code})"], capture_output=True, text=True)
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + f"import sys\nsys.exit({code})\n")
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == done.returncode
    err = capsys.readouterr().err
    assert err.startswith(done.stderr)  # "0.0" or "no data" on a line of its own, as python prints it
    if code in ("", "None", "0"):
        assert err == ""
    else:  # said, with the status the shell sees: "called sys.exit(256): exit status 0, as under python"
        assert f"the script called sys.exit({eval(code)!r}): exit status {done.returncode}, as under python" in err
    assert page.exists()  # memory up to the exit, whatever the status


def test_a_failing_script_shows_pythons_traceback(tmp_path, capsys):
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "def load(d):\n    return d['missing']\nload({})\n")
    status, traceback = _python(script, tmp_path)
    assert status == 1 and "KeyError: 'missing'" in traceback
    assert cli.main(["timeline", "--out", str(tmp_path / "run.html"), "--", "python", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(traceback)  # the same frames: none of runpy's or tinymem's
    assert err[len(traceback):] == "tinymem timeline: the script raised KeyError: exit status 1, as under python; " \
                                    "its page shows memory up to then\n"


def test_a_script_that_changes_folder_has_its_outputs_where_they_were_asked_for(tmp_path, monkeypatch, capsys):
    (tmp_path / "elsewhere").mkdir()
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "import os\nos.chdir('elsewhere')\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "--out", "page.html", "--snapshot", "step.pickle", "--", "python", "train.py"]) == 0
    assert "wrote page.html and step.pickle" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["elsewhere", "page.html", "step.pickle", "train.py"]
    assert os.listdir(tmp_path / "elsewhere") == [] and os.getcwd() == str(tmp_path)


@pytest.mark.parametrize("flag", ["--out", "--snapshot"])
@pytest.mark.parametrize("target", ["train.py", "data.txt", "config.json", "link.py", "hard.py", "template"])
def test_an_output_that_is_a_file_the_command_reads_is_refused_and_nothing_changes(tmp_path, monkeypatch, capsys,
                                                                                   flag, target):
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "open('ran', 'w').close()\n")
    (tmp_path / "data.txt").write_text("1 2 3")
    (tmp_path / "config.json").write_text("{}")
    os.symlink("train.py", tmp_path / "link.py")
    os.link(script, tmp_path / "hard.py")
    # The page's template, read by the command too: a copy, so that a failure cannot spoil the package's.
    (tmp_path / "timeline.html").write_bytes(open(page_module.TEMPLATE, "rb").read())
    monkeypatch.setattr(page_module, "TEMPLATE", str(tmp_path / "timeline.html"))
    monkeypatch.chdir(tmp_path)
    path = page_module.TEMPLATE if target == "template" else target
    before = _files(tmp_path)
    other = ["--snapshot", "step.pickle"] if flag == "--out" else ["--out", "page.html"]
    argv = [flag, path, *other, "--", "python", "train.py", "data.txt", "--config=config.json"]
    assert cli.main(["timeline", *argv]) == 2
    assert f"{flag} {path} is " in capsys.readouterr().err
    assert _files(tmp_path) == before
    # A good call after the refused one works.
    assert cli.main(["timeline", flag, "out.bin", *other, "--", "python", "train.py", "data.txt"]) == 0
    assert script.read_bytes() == before[script][0] and (tmp_path / "ran").exists()


def test_an_output_the_script_writes_itself_is_not_replaced(tmp_path, monkeypatch, capsys):
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "open('report.html', 'w').write('the script\\'s own report')\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "--out", "report.html", "--", "python", "train.py"]) == 2
    assert "the script itself wrote" in capsys.readouterr().err
    assert (tmp_path / "report.html").read_text() == "the script's own report"
    assert sorted(os.listdir(tmp_path)) == ["report.html", "train.py"]


def test_an_output_linked_into_a_missing_folder_is_refused_before_the_script_runs(tmp_path, monkeypatch, capsys):
    (tmp_path / "train.py").write_text(MAKES_AN_ARRAY + "open('ran', 'w').close()\n")
    os.symlink("gone/page.html", tmp_path / "page.html")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "--out", "page.html", "--", "python", "train.py"]) == 2
    assert f"the folder {tmp_path / 'gone'} does not exist" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["page.html", "train.py"]  # the script did not run


@pytest.mark.parametrize("flag", ["--out", "--snapshot"])
@pytest.mark.parametrize("path", ["", "results/", "results" + os.sep + os.sep])
def test_an_empty_output_or_one_naming_a_folder_is_refused_before_the_script_runs(tmp_path, monkeypatch, capsys,
                                                                                  flag, path):
    # "" is the current folder to realpath, "results/" a folder to the user: both refused as --out . is,
    # not run and then "no page written" (""), nor written as a file named results ("results/").
    (tmp_path / "train.py").write_text(MAKES_AN_ARRAY + "open('ran', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    other = ["--snapshot", "step.pickle"] if flag == "--out" else ["--out", "page.html"]
    assert cli.main(["timeline", flag, path, *other, "--", "python", "train.py"]) == 2
    assert f"cannot write {path!r}: give a file name" in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["train.py"]  # the script did not run; nothing written
    assert cli.main(["timeline", flag, "results.bin", *other, "--", "python", "train.py"]) == 0
    assert sorted(os.listdir(tmp_path)) == sorted(["train.py", "ran", "results.bin", other[1]])


def test_an_argument_that_is_not_utf8_still_has_its_page(tmp_path, capsys):
    # A shell passes bytes: python decodes b"\xff" as the lone surrogate "\udcff" and runs the script.
    # The page's title (the command) went into the page as such and could not be encoded: no page.
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "import sys\nassert sys.argv[1] == '\\udcff-x'\n")
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script), os.fsdecode(b"\xff-x")]) == 0
    assert "wrote" in capsys.readouterr().out
    assert f"<title>tinymem memory timeline: python {script} \\udcff-x</title>" in page.read_text(encoding="utf-8")


def test_a_script_interrupted_by_ctrl_c_has_its_page_and_pythons_traceback_and_status(tmp_path, capsys):
    # Ctrl-C on a long run: the memory up to then is what one wants to see. Before, the
    # KeyboardInterrupt went through the command: no page, a traceback through runpy and tinymem.
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "raise KeyboardInterrupt\n")
    status, traceback = _python(script, tmp_path)
    assert status == -2 and traceback.endswith("KeyboardInterrupt\n")  # python kills itself with SIGINT
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == 128 + 2  # what a shell shows
    err = capsys.readouterr().err
    assert err.startswith(traceback)
    assert ("the script raised KeyboardInterrupt: exit status 130, as under python; its page shows memory up to "
            "then") in err
    assert _peak_above_entry(page) == 256


def test_an_exit_code_whose_str_and_repr_raise_ends_as_under_python(tmp_path, capsys):
    # python prints an empty line for such a code and exits 1; before, the command's own message
    # (repr) and its print of the code (str) raised out of it: a traceback through tinymem.
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "class Code:\n    def __str__(self): raise RuntimeError('str')\n"
                      "    __repr__ = __str__\nimport sys\nsys.exit(Code())\n")
    assert _python(script, tmp_path) == (1, "\n")
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("\ntinymem timeline: the script called sys.exit(<Code instance at 0x")
    assert "Traceback" not in err
    assert err.endswith(">): exit status 1, as under python; its page shows memory up to then\n") and page.exists()


def test_a_script_that_removes_the_folder_it_was_started_in_ends_as_under_python(tmp_path, monkeypatch, capsys):
    # Before, going back to the removed folder raised FileNotFoundError in place of the script's
    # own ending: "the script raised FileNotFoundError: exit status 1", where python exits 0.
    (tmp_path / "work").mkdir()
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + f"import os, shutil\nos.chdir({str(tmp_path)!r})\nshutil.rmtree('work')\n")
    monkeypatch.chdir(tmp_path / "work")
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == 0
    assert capsys.readouterr().err == "" and _peak_above_entry(page) == 256
    assert os.getcwd() == str(tmp_path)  # where the script left it: its first folder is gone


def test_an_output_that_is_a_fifo_is_refused_before_the_script_runs(tmp_path, monkeypatch, capsys):
    # Before, the script ran and the page was renamed over the FIFO (over /dev/null, as root).
    (tmp_path / "train.py").write_text(MAKES_AN_ARRAY + "open('ran', 'w').close()\n")
    os.mkfifo(tmp_path / "page.html")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "--out", "page.html", "--", "python", "train.py"]) == 2
    assert "cannot write page.html: it is not a regular file" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["page.html", "train.py"] and (tmp_path / "page.html").is_fifo()


def test_a_script_whose_name_starts_with_python_is_run_not_taken_for_the_interpreter(tmp_path, monkeypatch):
    # Before, `-- python_train.py config.py` dropped python_train.py as if it were `python` and ran config.py.
    (tmp_path / "python_train.py").write_text(MAKES_AN_ARRAY + "import sys\nopen('ran', 'w').write(repr(sys.argv))\n")
    (tmp_path / "config.py").write_text("open('config ran', 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "--out", "page.html", "--", "python_train.py", "config.py"]) == 0
    assert (tmp_path / "ran").read_text().endswith("python_train.py', 'config.py']")
    assert not (tmp_path / "config ran").exists()


def test_the_script_sees_argv0_as_given_and_its_absolute_path_as_file_as_under_python(tmp_path, monkeypatch, capsys):
    # Before, runpy.run_path set sys.argv[0] to the script's absolute path; python keeps it as given.
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "import sys\nprint(sys.argv, __file__, __name__)\n")
    monkeypatch.chdir(tmp_path)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(cli.__file__)))
    python = subprocess.run([sys.executable, "train.py", "--epochs", "1"], env=env, capture_output=True, text=True,
                            timeout=120).stdout
    assert python == f"['train.py', '--epochs', '1'] {script} __main__\n"
    assert cli.main(["timeline", "--out", "page.html", "--", "python", "train.py", "--epochs", "1"]) == 0
    assert capsys.readouterr().out.startswith(python)


def test_a_script_whose_excepthook_raises_shows_what_python_shows_and_has_its_page(tmp_path, capsys):
    # Before, the hook's error went through the command: no page, a traceback through tinymem.
    script = tmp_path / "train.py"
    script.write_text(MAKES_AN_ARRAY + "import sys\ndef hook(*args):\n    raise RuntimeError('hook broke')\n"
                      "sys.excepthook = hook\nraise ValueError('v')\n")
    status, shown = _python(script, tmp_path)
    assert status == 1 and "Error in sys.excepthook:" in shown and "Original exception was:" in shown
    page = tmp_path / "run.html"
    assert cli.main(["timeline", "--out", str(page), "--", "python", str(script)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(shown) and "tinymem" not in err[:len(shown)]
    assert _peak_above_entry(page) == 256


def test_an_output_that_is_a_loop_of_symlinks_is_refused_before_the_script_runs(tmp_path, monkeypatch, capsys):
    # Before, os.stat of it raised out of the command: a traceback through tinymem, exit 1.
    (tmp_path / "train.py").write_text(MAKES_AN_ARRAY + "open('ran', 'w').close()\n")
    os.symlink("b.html", tmp_path / "a.html")
    os.symlink("a.html", tmp_path / "b.html")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "--out", "a.html", "--", "python", "train.py"]) == 2
    assert "cannot write a.html: Too many levels of symbolic links; give another file name" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["a.html", "b.html", "train.py"]
    assert os.readlink(tmp_path / "a.html") == "b.html"


def test_a_script_run_through_a_symlink_imports_beside_its_target_as_under_python(tmp_path, capsys):
    # python puts the folder of the link's target first on sys.path; before, the link's own folder
    # was put there, and `import helper` found another module than under python.
    for folder, name in (("real", "real"), ("other", "other")):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "helper.py").write_text(f"X = {name!r}\n")
    (tmp_path / "real" / "main.py").write_text(MAKES_AN_ARRAY + "import helper\nprint('helper', helper.X)\n")
    os.symlink("../real/main.py", tmp_path / "other" / "link.py")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(cli.__file__)))
    python = subprocess.run([sys.executable, str(tmp_path / "other" / "link.py")], env=env, capture_output=True,
                            text=True, timeout=120).stdout
    assert python == "helper real\n"
    assert cli.main(["timeline", "--out", str(tmp_path / "page.html"), "--", "python",
                     str(tmp_path / "other" / "link.py")]) == 0
    assert capsys.readouterr().out.startswith(python)


@pytest.mark.parametrize("options", [["-u"], ["-X", "dev"], ["-m", "train"]])
def test_pythons_own_options_are_refused_by_name(tmp_path, monkeypatch, capsys, options):
    # Before: "give a Python script after --", though one was given, after an option.
    (tmp_path / "train.py").write_text(MAKES_AN_ARRAY)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["timeline", "--out", "page.html", "--", "python", *options, "train.py"]) == 2
    assert (f"python's own option {options[0]} is not supported here: give the script right after python, "
            "e.g. tinymem timeline -- python train.py") in capsys.readouterr().err
    assert os.listdir(tmp_path) == ["train.py"]
