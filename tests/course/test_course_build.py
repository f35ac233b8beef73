"""``tinymem course build`` end to end on a tiny lesson (tinymem/course/build.py): the lessons
folder is swapped for one holding a single short lesson, so one kernel runs, for seconds."""
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
