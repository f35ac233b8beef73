"""``tinymem course grade SUBMISSIONS --out grades.csv``: the exercise checks over a whole class.

SUBMISSIONS holds one folder per student, each laid out as the course is:
``STUDENT/lessons/exercises/exNN.py`` (the files a student edits; anything else in the folder is
ignored). :func:`grade` runs, per student and in a separate process (:mod:`grade_run`), the same
checks ``TINYMEM_EXERCISES=student python -m pytest -m exercise_NN`` runs: the course's own
``tests/exercises/test_exNN.py``, against the tinymem of this checkout. It writes one row per
student, one column per exercise file (``passed``, ``failed: <check>: <first failing
assertion>``, ``error: <check>: <exception line>``, ``timeout``) and a ``notes`` column, as a
CSV and optionally a short HTML page (:mod:`grade_report`).

Isolation (what it gives): each student runs on a scratch copy of their ``lessons/exercises/``
(copied for the whole class before the first student runs), with HOME and TMPDIR inside it,
under a time and a memory limit, with its output capped; where Linux has Landlock, the process
can change files only inside its scratch folder (and /dev/shm). After each student the course's own files
(``lessons/``, ``tests/``, ``tinymem/``, ``pyproject.toml``) are compared with their contents
before the batch; a change is restored and named in that student's notes.
What it does not give: the checks run as the teacher's user. Without Landlock (older kernels,
macOS) a submission can write or delete anything the teacher can; with it, a submission can
still read every file, use the network, start processes and forge its own row. It is not a
security sandbox: grade untrusted code under a separate user or in a container.

Memory cost: the course's source files, held once to compare and restore them (a few MB).
"""
import math
import os
import pathlib
import shutil
import stat
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

from .grade_landlock import abi_version
from .grade_report import write_csv, write_html
from .grade_run import check_folder, memory_ceiling_mb

LAYOUT = pathlib.PurePosixPath("lessons", "exercises")
COURSE_PARTS = ("lessons", "tests", "tinymem", "pyproject.toml")
STAGE_LIMIT = 64 << 20  # a student's lessons/exercises/ is a few files of source


def course_checkout(checkout=None):
    """The tinymem checkout whose checks grade (default: the one this tinymem was imported from);
    refuses one without ``tests/exercises/`` (tinymem installed from a wheel has no checks)."""
    root = pathlib.Path(checkout) if checkout is not None else pathlib.Path(__file__).resolve().parents[2]
    needed = [root / "tests" / "conftest.py", root / "tests" / "exercises", root / "lessons" / "solutions",
              root / "pyproject.toml", root / "tinymem" / "__init__.py"]
    missing = [str(p.relative_to(root)) for p in needed if not p.exists()]
    if missing:
        raise ValueError(f"checkout: {root} is not a tinymem checkout (no {', '.join(missing)}): the grader runs the "
                         "checks in tests/exercises/ of a clone; install tinymem from one with "
                         "`git clone ... && pip install -e .` and run tinymem course grade from it")
    return root


def exercise_names(checkout, only=None):
    """The exercise files the course checks (``ex00``, ``ex06_seq``, ...), each with its
    tests/exercises/test_exNN.py; ``only``: lesson numbers ("00", "5", ...) to keep."""
    stems = sorted(p.stem for p in (checkout / "lessons" / "solutions").glob("ex*.py")
                   if (checkout / "tests" / "exercises" / f"test_{p.stem}.py").exists())
    if only is None:
        return stems
    lessons = sorted({s[2:4] for s in stems})
    if any(not str(n).strip() for n in only):  # else "" reads as lesson 00 ("--only 00," or --only "")
        raise ValueError(f"only: {list(only)!r} holds an empty lesson number; give lesson numbers, e.g. --only 00,05")
    wanted = {str(n).strip().zfill(2) for n in only}
    unknown = sorted(wanted - set(lessons))
    if unknown or not wanted:
        raise ValueError(f"only: lessons {unknown or 'none'} have no exercises; choose among {', '.join(lessons)} "
                         "(e.g. --only 00,05)")
    return [s for s in stems if s[2:4] in wanted]


def _students(submissions):
    folders = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not folders:
        raise ValueError(f"submissions: {submissions} holds no student folders; it should hold one folder per student, "
                         f"each with {LAYOUT}/exNN.py")
    return folders


def _snapshot(checkout):
    """``{relative path: bytes}`` of the course's own files (bytecode caches aside)."""
    files = {}
    for part in COURSE_PARTS:
        top = checkout / part
        for path in [top] if top.is_file() else sorted(top.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                files[path.relative_to(checkout).as_posix()] = path.read_bytes()
    return files


def _restore(checkout, before):
    """Put the course's files back as ``before`` holds them; the changes found, as sentences."""
    now = _snapshot(checkout)
    changes = []
    for name in sorted(set(before) | set(now)):
        if now.get(name) == before.get(name):
            continue
        path = checkout / name
        if name not in before:
            changes.append(f"{name} added")
            path.unlink()
        else:
            changes.append(f"{name} {'changed' if name in now else 'deleted'}")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(before[name])
    return changes


def _stage(folder, stage):
    """Copy a student's exercises into ``stage``: ``(problem, left_out)``, problem None or why
    their row cannot be graded, left_out the names not copied. Only plain files and folders are
    copied: a link may point at the reference answers (or anywhere), and a named pipe would
    block the copy, so neither is the student's own file. A file the teacher's user cannot read
    makes the row an error, not the batch's."""
    source = folder / LAYOUT
    if source.is_symlink() or not source.is_dir():
        return f"error: this folder has no {LAYOUT}/ (the grader expects STUDENT/{LAYOUT}/exNN.py)", []
    size = sum(p.lstat().st_size for p in source.rglob("*"))
    if size > STAGE_LIMIT:
        return f"error: {LAYOUT}/ holds {size / 1e6:.0f} MB; the grader copies at most {STAGE_LIMIT >> 20} MiB", []
    left_out = []

    def ignore(directory, names):
        modes = {n: os.lstat(os.path.join(directory, n)).st_mode for n in names}
        odd = sorted(n for n, m in modes.items() if not (stat.S_ISREG(m) or stat.S_ISDIR(m)))
        left_out.extend(odd)
        return {*odd, "__pycache__"}

    try:
        shutil.copytree(source, stage, ignore=ignore)
    except OSError as exc:  # a file the teacher's user cannot read: this row, not the batch
        path, reason = exc.args[0][0][::2] if isinstance(exc, shutil.Error) else (exc.filename, exc.strerror)
        name = pathlib.Path(os.fspath(path)).relative_to(source).as_posix().removeprefix(".")
        return f"error: {LAYOUT}/{name} could not be copied ({str(reason).split(':')[0]})", left_out
    return None, left_out


def _grade_one(student, stage, staged, stems, checkout, limits, course):
    """One student's row: their checks, then the course's files compared (and restored) under the
    lock ``course = (files before the batch, lock, jobs)``; ``staged`` is what :func:`_stage` said."""
    problem, left_out = staged
    row = {"student": student, "notes": []}
    if left_out:
        row["notes"].append("not copied (links and special files are not the student's own): " + ", ".join(left_out))
    if problem is None:
        missing = [s for s in stems if not (stage / f"{s}.py").is_file()]
        row.update({s: f"error: {LAYOUT}/{s}.py is missing" for s in missing})
        verdicts, notes, _ = check_folder(checkout, stage, [s for s in stems if s not in missing], *limits)
        row.update(verdicts)
        row["notes"] += notes
    else:
        row.update({s: problem for s in stems})
    before, lock, jobs = course
    with lock:
        changes = _restore(checkout, before)
    if changes:
        alongside = " (other students were checked at the same time)" if jobs > 1 else ""
        row["notes"].append(f"course files changed while it ran{alongside}, restored: " + ", ".join(changes))
    if not limits[-1]:
        row["notes"].append("writes not confined by Landlock")
    row["notes"] = "; ".join(dict.fromkeys(row["notes"]))
    return row


def _check_outputs(submissions, out, html):
    """Refuse, before anyone is graded, an ``out``/``html`` that could not be written or that
    would land in a student's folder (a re-grade would find it there; ``exNN.py`` would be lost)."""
    written = {}
    for name, path in (("out", out), ("html", html)):
        if path is None:
            continue
        target = pathlib.Path(path).resolve()
        if target.is_dir():
            raise ValueError(f"{name}: {str(path)!r} is a folder; give a file name (e.g. grades.csv)")
        if not target.parent.is_dir():
            raise ValueError(f"{name}: the folder of {path} does not exist; create it first")
        inside = target.relative_to(submissions.resolve()).parts if target.is_relative_to(submissions.resolve()) else ()
        if len(inside) > 1:
            raise ValueError(f"{name}: {path} is inside the student folder {submissions / inside[0]}; write the "
                             f"grades beside the class (e.g. {submissions.parent / 'grades.csv'})")
        if target in written.values():
            raise ValueError(f"{name}: {path} is the same file as out; give the page its own name (e.g. grades.html)")
        written[name] = target


def grade(submissions, out, html=None, timeout=120.0, memory_mb=4096, only=None, jobs=1, checkout=None,
          confine=True, echo=print):
    """Grade every student folder in ``submissions``; write the CSV ``out`` (and the page ``html``).
    ``confine=False`` (or a kernel without Landlock) leaves writes unconfined. Returns the rows
    (dicts keyed by ``student``, each exercise name, ``notes``)."""
    submissions, out = pathlib.Path(submissions), pathlib.Path(out)
    checkout = course_checkout(checkout)
    if not submissions.is_dir():
        raise ValueError(f"submissions: {submissions} is not a folder; give the folder that holds one folder "
                         "per student")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise ValueError(f"timeout: {timeout!r} must be a positive, finite number of seconds")
    for name, value in (("memory", memory_mb), ("jobs", jobs)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: {value!r} must be a positive whole number")
    if memory_mb < 512:
        raise ValueError(f"memory: {memory_mb} MB is too little to import NumPy, PyTorch and pytest; give 512 or more")
    if memory_mb > memory_ceiling_mb():
        raise ValueError(f"memory: {memory_mb} MB is more than a process's address space can be here "
                         f"({memory_ceiling_mb()} MB); give less (the default is 4096)")
    _check_outputs(submissions, out, html)
    stems, students = exercise_names(checkout, only), _students(submissions)
    limits = (timeout, memory_mb, confine and abi_version() >= 1)
    course = (_snapshot(checkout), threading.Lock(), jobs)
    with tempfile.TemporaryDirectory(prefix="tinymem-grade-") as batch:
        # the whole class is copied first: no submission can reach another's files before they are read
        stages = [pathlib.Path(batch) / str(i) for i in range(len(students))]
        staged = [_stage(student, stage) for student, stage in zip(students, stages)]

        def one(student, stage, staged):
            # a folder name that is not UTF-8 (a zip from an old system) is shown with \xNN escapes
            name = os.fsencode(student.name).decode("utf-8", "backslashreplace")
            row = _grade_one(name, stage, staged, stems, checkout, limits, course)
            echo(f"{name}: " + ", ".join(f"{s} {row[s].split(':')[0]}" for s in stems))
            return row

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            rows = list(pool.map(one, students, stages, staged))
    columns = ["student", *stems, "notes"]
    write_csv(out, columns, rows)
    if html is not None:
        write_html(html, columns, rows)
    return rows
