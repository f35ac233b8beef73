"""``tinymem course build`` end to end on a tiny lesson (tinymem/course/build.py): the lessons
folder is swapped for one holding a single short lesson, so one kernel runs, for seconds."""
import os

import pytest

from conftest import requires_course
from test_course_execute import TINY  # a lesson that predicts, reveals and draws a figure


@pytest.fixture
def tiny_course(tmp_path, monkeypatch):
    """The build's lessons folder holds one lesson, ``98_tiny.py``; the working folder is ``tmp_path``."""
    from tinymem.course import build

    lessons = tmp_path / "lessons"
    lessons.mkdir()
    (lessons / "98_tiny.py").write_text(TINY)
    monkeypatch.setattr(build, "LESSONS", lessons)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@requires_course
def test_a_relative_out_folder_gets_the_notebooks_and_the_site(tiny_course, capsys):
    import nbformat

    from tinymem import cli

    # The default --out (course_site/quick) is relative; each lesson runs in a scratch folder.
    assert cli.main(["course", "build", "--quick", "--out", "rel", "--jobs", "1"]) == 0, capsys.readouterr().err
    notebook = nbformat.read(tiny_course / "rel" / "notebooks" / "98_tiny.ipynb", as_version=4)
    assert any("image/png" in o.get("data", {}) for c in notebook.cells for o in c.get("outputs", []))
    assert (tiny_course / "rel" / "figures" / "98_tiny" / "tiny.png").is_file()
    assert (tiny_course / "rel" / "site" / "lessons" / "98_tiny.html").is_file()


@pytest.mark.parametrize("argv, says", [
    (["--only", ""], "--only '': give lesson numbers"),
    (["--only", "1x"], "--only '1x': give lesson numbers"),
    (["--timeout", "nan"], "--timeout nan must be a positive, finite number"),
    (["--timeout", "inf"], "--timeout inf must be a positive, finite number"),
    (["--source-url", "javascript:alert(1)//"], "--source-url 'javascript:alert(1)//' must be an http"),
    (["--source-url", "tinymem/blob/main"], "must be an http:// or https:// address"),
])
def test_bad_values_are_refused_by_name_before_anything_runs_or_is_written(tiny_course, capsys, argv, says):
    from tinymem import cli

    assert cli.main(["course", "build", "--quick", "--out", "out", *argv]) == 2
    assert says in capsys.readouterr().err
    assert sorted(p.name for p in tiny_course.iterdir()) == ["lessons"]  # nothing written, no lesson ran


def test_an_out_folder_in_the_checkout_a_file_or_read_only_is_refused(tiny_course, capsys):
    from tinymem import cli
    from tinymem.course.build import ROOT

    for out in (ROOT, ROOT / "lessons", ROOT / "tinymem", ROOT.parent):
        assert cli.main(["course", "build", "--quick", "--out", str(out)]) == 2
        assert "would write into the course's own files" in capsys.readouterr().err
    assert not (ROOT / "lessons" / "notebooks").exists() and not (ROOT / "site").exists()
    (tiny_course / "a_file").write_text("mine")
    assert cli.main(["course", "build", "--quick", "--out", "a_file"]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err and (tiny_course / "a_file").read_text() == "mine"
    (tiny_course / "mine" / "site").mkdir(parents=True)
    (tiny_course / "mine" / "site" / "thesis.tex").write_text("mine")
    assert cli.main(["course", "build", "--quick", "--out", "mine"]) == 2
    assert "holds a site/ or notebooks/ folder this command did not write" in capsys.readouterr().err
    assert (tiny_course / "mine" / "site" / "thesis.tex").read_text() == "mine"
    if os.geteuid() == 0:  # root writes anywhere: no folder is read-only to it
        return
    locked = tiny_course / "locked"
    locked.mkdir(mode=0o555)
    try:
        assert cli.main(["course", "build", "--quick", "--out", "locked/out"]) == 2
        assert f"{locked} is not writable" in capsys.readouterr().err
    finally:
        locked.chmod(0o755)
    assert not (locked / "out").exists()


LOOPS = '''# %% [markdown]
# # Lesson 96 - a lesson that never ends

# %%
import os, pathlib
pathlib.Path(os.environ["TINYMEM_LESSON_OUT"]).mkdir(parents=True, exist_ok=True)
(pathlib.Path(os.environ["TINYMEM_LESSON_OUT"]) / "kernel.pid").write_text(str(os.getpid()))

# %%
print("the lesson's second cell")
while True:
    pass
'''


@requires_course
def test_a_lesson_past_its_time_is_named_with_its_cell_and_its_kernel_is_gone(tiny_course, capsys):
    from tinymem import cli

    (tiny_course / "lessons" / "98_tiny.py").unlink()
    (tiny_course / "lessons" / "96_loops.py").write_text(LOOPS)
    assert cli.main(["course", "build", "--quick", "--out", "out", "--timeout", "20"]) == 1
    err = capsys.readouterr().err
    assert "96_loops.py line 11 (notebook cell 3, which begins `print(\"the lesson's second cell\")`)" in err, err
    assert "CellTimeoutError" in err and not (tiny_course / "out" / "site").exists()
    pid = int((tiny_course / "out" / "figures" / "96_loops" / "kernel.pid").read_text())
    with pytest.raises(ProcessLookupError):  # the kernel was shut down with its lesson
        os.kill(pid, 0)
