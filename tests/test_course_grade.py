"""``tinymem course grade`` on a small class made here: each row exactly, nothing else touched.

The class: the reference answers, wrong answers on file (tests/exercises/wrong/), a syntax error,
an endless loop, a submission that deletes a file beside the class's folder and one of the
course's own files, one that prints megabytes (and fails with a ``<script>`` message), and a
folder without lessons/exercises/. The course is a copy of this checkout made in the test, so a
deletion that got through could never reach the real one. Only lessons 00 and 05 are graded,
with two students side by side (where Landlock is), to keep the test cheap.
"""
import csv
import pathlib
import re
import shutil

import pytest

from tinymem.course import grade as grading
from tinymem.course.grade_landlock import abi_version

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "lessons" / "solutions"
WRONG = ROOT / "tests" / "exercises" / "wrong"
SCRIPT = "<script>alert('graded')</script>"


def tree(folder):
    """``{relative path: bytes}`` of every file under ``folder``."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and "__pycache__" not in p.parts}


def copy_course(dest):
    for part in ("tinymem", "tests", "lessons"):
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def student(folder, name, ex00, ex05):
    exercises = folder / name / "lessons" / "exercises"
    exercises.mkdir(parents=True)
    (exercises / "ex00.py").write_text(ex00)
    (exercises / "ex05.py").write_text(ex05)


def deleter(*paths):
    """Source that tries to delete every one of ``paths`` (at each import: each check imports the
    file afresh, so a path already gone is passed over), then raises the first refusal."""
    return (f"import os\nrefused = []\nfor path in {[str(p) for p in paths]!r}:\n    try:\n        os.remove(path)\n"
            "    except FileNotFoundError:\n        pass\n    except OSError as exc:\n        refused.append(exc)\n"
            "if refused:\n    raise refused[0]\n")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("grading")
    course, submissions = copy_course(root / "course"), root / "class"
    canary = root / "canary.txt"
    canary.write_text("the teacher's file beside the class's folder")
    ok00, ok05 = (SOLUTIONS / "ex00.py").read_text(), (SOLUTIONS / "ex05.py").read_text()
    student(submissions, "correct", ok00, ok05)
    student(submissions, "wrong", ok00 + (WRONG / "ex00_fixed_four_bytes.py").read_text(),
            ok05 + (WRONG / "ex05_lion_in_place.py").read_text())
    student(submissions, "syntax", ok00 + "\nbroken = (1,\n", ok05)
    # an endless loop that sleeps: the limit is on wall-clock time, and the test spares the CPU
    student(submissions, "loops", "import time\nwhile True:\n    time.sleep(0.1)\n" + ok00, ok05)
    course_file = course / "lessons" / "solutions" / "ex00.py"
    student(submissions, "deletes", deleter(canary, course_file) + ok00, ok05)
    student(submissions, "prints", "import sys\nsys.stdout.write('x' * (1 << 21))\n" + ok00,
            ok05 + f"\n\ndef lion_step(*args, **kwargs):\n    raise AssertionError({SCRIPT!r})\n")
    (submissions / "no_layout" / "lessons").mkdir(parents=True)
    outside = {"course": tree(course), "canary": canary.read_bytes(), "class": tree(submissions)}
    out, page = root / "grades.csv", root / "grades.html"
    # side by side only where Landlock stops the deletions: else a course file deleted by one
    # student could be found (and named) after another's run, and rows could not be exact
    rows = grading.grade(submissions, out, html=page, timeout=10, memory_mb=3072, only=["00", "05"],
                         jobs=2 if abi_version() >= 1 else 1, checkout=course, echo=lambda line: None)
    return {"rows": {r["student"]: r for r in rows}, "out": out, "page": page, "root": root, "course": course,
            "canary": canary, "submissions": submissions, "outside": outside, "course_file": course_file}


def test_each_row_is_graded_exactly(graded):
    rows, confined = graded["rows"], abi_version() >= 1
    assert rows["correct"] == {"student": "correct", "ex00": "passed", "ex05": "passed", "notes": "" if confined
                               else "writes not confined by Landlock"}
    # bytes_per_value=2 asked, 4 assumed: twice the bytes (the check's own assertion, as pytest shows it)
    assert rows["wrong"]["ex00"] == "failed: test_parameter_bytes[sizes0]: assert 60 == (60 // 2)"
    assert rows["wrong"]["ex05"] == ("failed: test_lion_step_matches_the_optimizer: "
                                     "return new arrays: leave p, m, g as they are")
    line = len(source(graded, "syntax"))  # the file's last line opens a parenthesis
    assert rows["syntax"]["ex00"] == ("error: test_parameter_bytes[sizes0]: SyntaxError: '(' was never closed "
                                      f"(ex00.py, line {line})")
    assert rows["syntax"]["ex05"] == "passed"
    # the loop is killed at the time limit; ex05, not yet reached, runs again in a fresh process
    assert (rows["loops"]["ex00"], rows["loops"]["ex05"]) == ("timeout", "passed")
    assert rows["prints"]["ex00"] == "passed"
    assert rows["prints"]["ex05"] == f"failed: test_lion_step_matches_the_optimizer: {SCRIPT}"
    printed = float(re.fullmatch(r"printed (\d+\.\d) MB \(not kept\).*", rows["prints"]["notes"]).group(1))
    assert printed >= 2.0  # 2 MiB per import of the file, each check imports it afresh
    assert rows["no_layout"]["ex00"] == rows["no_layout"]["ex05"] == (
        "error: this folder has no lessons/exercises/ (the grader expects STUDENT/lessons/exercises/exNN.py)")
    if confined:  # the kernel refused both deletions: the first one's error is the verdict
        assert rows["deletes"]["ex00"] == (f"error: test_parameter_bytes[sizes0]: PermissionError: [Errno 13] "
                                           f"Permission denied: {str(graded['canary'])!r}")
        assert rows["deletes"]["notes"] == ""
    else:  # both deletions went through; the course's file was put back and the row says so
        assert rows["deletes"]["ex00"] == "passed"
        assert rows["deletes"]["notes"] == ("course files changed while it ran, restored: lessons/solutions/ex00.py "
                                            "deleted; writes not confined by Landlock")
    assert rows["deletes"]["ex05"] == "passed"


def source(graded, name):
    return (graded["submissions"] / name / "lessons" / "exercises" / "ex00.py").read_text().splitlines()


def test_nothing_outside_the_submissions_changed(graded):
    assert tree(graded["course"]) == graded["outside"]["course"]
    assert tree(graded["submissions"]) == graded["outside"]["class"]  # graded on copies
    if abi_version() >= 1:
        assert graded["canary"].read_bytes() == graded["outside"]["canary"]
    else:
        pytest.skip("without Landlock a submission can delete the teacher's files (the README says so)")
    assert sorted(p.name for p in graded["root"].iterdir()) == ["canary.txt", "class", "course", "grades.csv",
                                                                "grades.html"]


def test_the_csv_and_the_page_hold_the_rows(graded):
    with open(graded["out"], newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["student"] for r in table] == ["correct", "deletes", "loops", "no_layout", "prints", "syntax", "wrong"]
    assert table == [dict(graded["rows"][r["student"]]) for r in table]
    page = graded["page"].read_text()
    assert SCRIPT not in page and "&lt;script&gt;alert(&#x27;graded&#x27;)&lt;/script&gt;" in page
    passed00 = sum(r["ex00"] == "passed" for r in table)
    assert f"<td>passed</td><td>{passed00} / 7</td>" in page


def test_a_refused_call_writes_nothing(tmp_path):
    (tmp_path / "class" / "a" / "lessons" / "exercises").mkdir(parents=True)
    out = tmp_path / "grades.csv"
    with pytest.raises(ValueError, match="only: lessons \\['99'\\] have no exercises; choose among 00, 01"):
        grading.grade(tmp_path / "class", out, only=["99"])
    with pytest.raises(ValueError, match="memory: 100 MB is too little"):
        grading.grade(tmp_path / "class", out, memory_mb=100)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no student folders"):
        grading.grade(tmp_path / "empty", out)
    with pytest.raises(ValueError, match="is not a tinymem checkout .*tests/conftest.py"):
        grading.grade(tmp_path / "class", out, checkout=tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["class", "empty"]


def test_the_command_line_names_the_layout_and_refuses_clearly(tmp_path, capsys):
    from tinymem.cli import main

    with pytest.raises(SystemExit):
        main(["course", "grade", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "STUDENT/lessons/exercises/exNN.py" in text and "not a security sandbox" in text
    assert main(["course", "grade", str(tmp_path / "nowhere"), "--out", str(tmp_path / "g.csv")]) == 2
    assert "submissions: " in capsys.readouterr().err and not list(tmp_path.iterdir())


def test_without_landlock_a_deleted_course_file_is_put_back_and_named(tmp_path):
    """Where the kernel cannot confine writes (confine=False here), the deletion goes through:
    the grader finds the course's file gone after the student, restores it and says so."""
    course = copy_course(tmp_path / "course")
    target, canary = course / "lessons" / "solutions" / "ex00.py", tmp_path / "canary.txt"
    canary.write_text("beside the class")
    before = tree(course)
    student(tmp_path / "class", "deletes", deleter(canary, target) + (SOLUTIONS / "ex00.py").read_text(), "")
    rows = grading.grade(tmp_path / "class", tmp_path / "grades.csv", timeout=20, memory_mb=3072, only=["00"],
                         checkout=course, confine=False, echo=lambda line: None)
    assert rows == [{"student": "deletes", "ex00": "passed", "notes": "course files changed while it ran, restored: "
                     "lessons/solutions/ex00.py deleted; writes not confined by Landlock"}]
    assert tree(course) == before
    assert not canary.exists()  # the limit the README states: without Landlock it writes where you can


@pytest.mark.slow
def test_the_reference_answers_pass_every_exercise_under_the_grader(tmp_path):
    """Every exercise's checks can pass inside the grader's limits and confinement (lesson 9's
    two jobs share a simulated device in /dev/shm: confined away from it, they failed)."""
    shutil.copytree(SOLUTIONS, tmp_path / "class" / "reference" / "lessons" / "exercises")
    rows = grading.grade(tmp_path / "class", tmp_path / "grades.csv", echo=lambda line: None)
    assert {k: v for k, v in rows[0].items() if v != "passed"} == {"student": "reference", "notes": ""}
    assert len(rows[0]) == 2 + len(list(SOLUTIONS.glob("ex*.py")))
