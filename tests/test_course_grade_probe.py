"""``tinymem course grade`` as a careless teacher and clumsy students use it: values refused at the
door (before any student runs, nothing written), odd files in a submission that must not stop
the batch. Each grading here runs lesson 00 only, on a copy of the course, with a short limit."""
import math
import os
import pathlib
import signal
import subprocess
import sys
import tempfile

import pytest

from tinymem.course import grade as grading

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "lessons" / "solutions"


def student(submissions, name, ex00=None):
    exercises = submissions / name / "lessons" / "exercises"
    exercises.mkdir(parents=True)
    (exercises / "ex00.py").write_text(ex00 if ex00 is not None else (SOLUTIONS / "ex00.py").read_text())
    return exercises


def files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


@pytest.mark.parametrize("kwargs,message", [
    ({"timeout": math.inf}, "timeout: inf must be a positive, finite number of seconds"),
    ({"timeout": True}, "timeout: True must be a positive, finite number of seconds"),
    ({"memory_mb": 1024.5}, "memory: 1024.5 must be a positive whole number"),
    ({"memory_mb": 1 << 60}, f"memory: {1 << 60} MB is more than a process's address space can be"),
    ({"jobs": 1.5}, "jobs: 1.5 must be a positive whole number"),
    ({"only": [""]}, "only: .* holds an empty lesson number"),
    ({"only": ["00", ""]}, "only: .* holds an empty lesson number"),
    ({"out": "{tmp}/out"}, "out: '.*/out' is a folder; give a file name"),
    ({"out": ""}, "out: '.' is a folder; give a file name"),
    ({"html": "{tmp}/out"}, "html: '.*/out' is a folder; give a file name"),
    ({"html": "{tmp}/grades.csv"}, "html: .*grades.csv is the same file as out"),
    ({"out": "{tmp}/class/alice/grades.csv"}, "out: .* is inside the student folder .*alice"),
    ({"html": "{tmp}/class/alice/lessons/exercises/ex00.py"}, "html: .* is inside the student folder .*alice"),
])
def test_bad_values_are_refused_before_any_student_runs(tmp_path, kwargs, message):
    """Before, each of these graded the whole class (inf: a loop was never stopped; '' lesson:
    read as lesson 00), then failed on writing, crashed starting the child (memory), or
    overwrote a student's file with the grades."""
    student(tmp_path / "class", "alice")
    (tmp_path / "out").mkdir()
    kwargs = {k: v.format(tmp=tmp_path) if isinstance(v, str) else v for k, v in kwargs.items()}
    arguments = {"out": tmp_path / "grades.csv", "only": ["00"], "timeout": 10, "memory_mb": 3072} | kwargs
    before = files(tmp_path)
    with pytest.raises(ValueError, match=message):
        grading.grade(tmp_path / "class", echo=lambda line: None, **arguments)
    assert files(tmp_path) == before


def test_links_and_pipes_in_a_submission_are_left_out_and_named(tmp_path):
    """Before, a named pipe in one student's folder stopped the whole batch (shutil.Error from
    copytree, no row written), and an ``ex00.py`` that links to the reference answers was
    graded ``passed`` (the copy kept the link, the checks read the course's own file)."""
    student(tmp_path / "class", "pipe")
    os.mkfifo(tmp_path / "class" / "pipe" / "lessons" / "exercises" / "notes")
    linked = student(tmp_path / "class", "linked", "")
    (linked / "ex00.py").unlink()
    (linked / "ex00.py").symlink_to(SOLUTIONS / "ex00.py")
    rows = grading.grade(tmp_path / "class", tmp_path / "grades.csv", only=["00"], timeout=20, memory_mb=3072,
                         echo=lambda line: None)
    confined = "" if grading.abi_version() >= 1 else "; writes not confined by Landlock"
    assert rows == [
        {"student": "linked", "ex00": "error: lessons/exercises/ex00.py is missing",
         "notes": "not copied (links and special files are not the student's own): ex00.py" + confined},
        {"student": "pipe", "ex00": "passed",
         "notes": "not copied (links and special files are not the student's own): notes" + confined}]


@pytest.mark.skipif(grading.abi_version() < 6, reason="Landlock scopes signals from ABI 6 (Linux 6.12)")
def test_a_submission_cannot_signal_processes_it_did_not_start(tmp_path):
    """Before, ``os.kill(os.getppid(), SIGKILL)`` in a submission killed the grader, and the
    batch with it (no CSV). Here the target is a process of the test's, not the grader itself."""
    outside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        student(tmp_path / "class", "kills", f"import os, signal\nos.kill({outside.pid}, signal.SIGKILL)\n")
        rows = grading.grade(tmp_path / "class", tmp_path / "grades.csv", only=["00"], timeout=20, memory_mb=3072,
                             echo=lambda line: None)
        assert outside.poll() is None
        assert rows == [{"student": "kills", "ex00": "error: test_parameter_bytes[sizes0]: PermissionError: "
                         "[Errno 1] Operation not permitted", "notes": ""}]
    finally:
        outside.kill()
        outside.wait()


def test_the_notebooks_check_refuses_a_folder_without_the_lessons_files(tmp_path):
    """Before, a missing folder raised copytree's bare FileNotFoundError, and a folder without
    ex00.py ran every check, each failing on a temporary path that no longer exists."""
    from tinymem.course.grade_notebook import check

    lines = []
    with pytest.raises(ValueError, match=f"folder: {tmp_path / 'nowhere'} is not a folder"):
        check(0, folder=tmp_path / "nowhere", echo=lines.append)
    (tmp_path / "ex05.py").write_text("")
    with pytest.raises(ValueError, match=f"folder: {tmp_path} has no ex00.py; lesson 00's exercises are in ex00.py"):
        check("0", folder=tmp_path, echo=lines.append)
    assert lines == [] and files(tmp_path) == ["ex05.py"]


def test_a_folder_name_that_is_not_utf8_gets_its_row(tmp_path):
    """A zip made on an old system names a folder in Latin-1 (``Zo\\xeb``). Before, the whole class
    was graded, then writing the CSV raised UnicodeEncodeError: no file, every row lost."""
    exercises = os.fsencode(tmp_path / "class") + b"/Zo\xeb/lessons/exercises"
    os.makedirs(exercises)
    with open(exercises + b"/ex00.py", "w") as f:
        f.write((SOLUTIONS / "ex00.py").read_text())
    out, page = tmp_path / "grades.csv", tmp_path / "grades.html"
    rows = grading.grade(tmp_path / "class", out, html=page, only=["00"], timeout=20, memory_mb=3072,
                         echo=lambda line: None)
    assert [(r["student"], r["ex00"]) for r in rows] == [("Zo\\xeb", "passed")]
    assert out.read_text(encoding="utf-8").splitlines()[1].startswith("Zo\\xeb,passed,")
    assert "<td class=\"\">Zo\\xeb</td>" in page.read_text(encoding="utf-8")


def test_a_submission_that_nests_thousands_of_folders_does_not_stop_the_batch(tmp_path, monkeypatch):
    """Before, removing that student's run folder raised RecursionError (shutil.rmtree recurses
    once per level): the batch stopped there, no CSV, the folders left in the temporary folder."""
    nest = ("import os\nif not os.path.exists('d'):\n    here = os.getcwd()\n    for _ in range(2000):\n"
            "        os.mkdir('d')\n        os.chdir('d')\n    os.chdir(here)\n")
    student(tmp_path / "class", "nests", nest + (SOLUTIONS / "ex00.py").read_text())
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # the grader's run folders go here
    rows = grading.grade(tmp_path / "class", tmp_path / "grades.csv", only=["00"], timeout=30, memory_mb=3072,
                         echo=lambda line: None)
    assert [(r["student"], r["ex00"]) for r in rows] == [("nests", "passed")]
    assert (tmp_path / "grades.csv").read_text().splitlines() == ["student,ex00,notes", "nests,passed,"]
    assert list((tmp_path / "tmp").iterdir()) == []


def test_a_student_killed_by_a_real_time_signal_gets_its_row(tmp_path):
    """Before, naming the signal raised ValueError (Python's Signals has no name for SIGRTMIN+1),
    which stopped the batch: no CSV."""
    student(tmp_path / "class", "rt", "import os, signal\nos.kill(os.getpid(), signal.SIGRTMIN + 1)\n")
    rows = grading.grade(tmp_path / "class", tmp_path / "grades.csv", only=["00"], timeout=20, memory_mb=3072,
                         echo=lambda line: None)
    number = int(signal.SIGRTMIN) + 1
    assert rows[0]["ex00"] == (f"error: test_parameter_bytes[sizes0]: the checks' process ended "
                               f"(killed by signal {number})")


def test_a_results_file_replaced_by_a_folder_costs_only_that_row(tmp_path):
    """The checks process writes its results to a file in the student's run folder, where the
    student may write. Before, replacing it with a folder made the grader's read raise
    IsADirectoryError and stopped the batch (with a named pipe, the grader waited forever)."""
    student(tmp_path / "class", "swaps", "import os, sys\nif os.path.isfile(sys.argv[1]):\n"
                                         "    os.remove(sys.argv[1])\n    os.mkdir(sys.argv[1])\n")
    rows = grading.grade(tmp_path / "class", tmp_path / "grades.csv", only=["00"], timeout=20, memory_mb=3072,
                         echo=lambda line: None)
    assert rows[0]["ex00"].startswith("error: no check ran (exit status 1: ")


def test_a_file_the_teacher_cannot_read_costs_only_that_row(tmp_path, monkeypatch):
    """A file or a lessons/exercises/ folder that the teacher's user cannot read (mode 000 from a
    zip; this test runs as any user, root too, so the refusals are made here). Before, copytree's
    shutil.Error or PermissionError stopped the batch before anyone was graded: no CSV."""
    import shutil

    copyfile = shutil.copyfile

    def unreadable(source, *args, **kwargs):
        if os.path.basename(source) == "locked.py":
            raise PermissionError(13, "Permission denied", source)
        return copyfile(source, *args, **kwargs)

    closed, scandir = student(tmp_path / "class", "closed"), os.scandir

    def unlisted(path="."):  # the folder itself cannot be listed (mode 000)
        if not isinstance(path, int) and os.fspath(path) == str(closed):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return scandir(path)

    (student(tmp_path / "class", "locked") / "locked.py").write_text("")
    student(tmp_path / "class", "next")
    monkeypatch.setattr(shutil, "copyfile", unreadable)
    monkeypatch.setattr(os, "scandir", unlisted)
    rows = grading.grade(tmp_path / "class", tmp_path / "grades.csv", only=["00"], timeout=20, memory_mb=3072,
                         echo=lambda line: None)
    assert [(r["student"], r["ex00"]) for r in rows] == [
        ("closed", "error: lessons/exercises/ could not be copied (Permission denied)"),
        ("locked", "error: lessons/exercises/locked.py could not be copied ([Errno 13] Permission denied)"),
        ("next", "passed")]
