"""A lesson's exercises as a notebook: the student's ``exNN.py`` loaded, its checks run, readably.

:func:`exercises_notebook` builds the notebook (nbformat, unexecuted: a student runs it after
editing their file); :func:`check` is what its cells call. The checks are the course's own
(``tests/exercises/test_exNN.py``), run as ``tinymem course grade`` runs them, in a separate
process on a copy of the student's files, so a check's monkeypatching never touches the kernel.

Memory cost: one child process at a time, with the grader's limits.
"""
import ast
import importlib.util
import pathlib

from .grade import course_checkout, exercise_names
from .grade_landlock import abi_version
from .grade_run import check_folder

MARKS = {"passed": "✓", "skipped": "-", "failed": "✗", "error": "✗", "timeout": "✗"}


def load_student(stem, folder=None):
    """Import the student's ``lessons/exercises/{stem}.py`` afresh (a new module object)."""
    folder = pathlib.Path(folder) if folder is not None else course_checkout() / "lessons" / "exercises"
    path = folder / f"{stem}.py"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: the exercises of this lesson live in lessons/exercises/")
    spec = importlib.util.spec_from_file_location(f"student_{stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(lesson, folder=None, timeout=120.0, memory_mb=4096, echo=print):
    """Run lesson ``lesson``'s checks on the student's files in ``folder`` (default: this
    checkout's lessons/exercises/) and print one line per check; returns ``{exercise: verdict}``
    as the grader writes them."""
    checkout = course_checkout()
    stems = exercise_names(checkout, only=[lesson])
    folder = pathlib.Path(folder) if folder is not None else checkout / "lessons" / "exercises"
    if not folder.is_dir():
        raise ValueError(f"folder: {folder} is not a folder; give the folder that holds your exNN.py files")
    missing = [f"{stem}.py" for stem in stems if not (folder / f"{stem}.py").is_file()]
    if missing:
        raise ValueError(f"folder: {folder} has no {', '.join(missing)}; lesson {stems[0][2:4]}'s exercises are in "
                         f"{', '.join(f'{s}.py' for s in stems)} (copy them from lessons/exercises/)")
    verdicts, notes, checks = check_folder(checkout, folder, stems, timeout, memory_mb, abi_version() >= 1)
    for stem in stems:
        mine = [c for c in checks if c[0] == stem]
        passed = sum(outcome == "passed" for _, _, outcome, _ in mine)
        echo(f"{stem} ({folder.name}/{stem}.py): {passed} of {len(mine)} checks pass -> {verdicts[stem].split(':')[0]}")
        for _, test, outcome, message in mine:
            echo(f"  {MARKS.get(outcome, '?')} {test}" + (f"  [{outcome}] {message}" if outcome != "passed" else ""))
    for note in notes:
        echo(f"note: {note}")
    return verdicts


def _functions(stem, checkout):
    """``[(name, first docstring line)]`` of the exercise file's functions, read (not run) from
    lessons/exercises/ (the reference answers' file names the same functions, without docstrings)."""
    for folder in ("exercises", "solutions"):  # a student's file may not parse
        try:
            tree = ast.parse((checkout / "lessons" / folder / f"{stem}.py").read_text())
        except (OSError, SyntaxError):
            continue
        return [(node.name, (ast.get_docstring(node) or "").split("\n")[0]) for node in tree.body
                if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")]
    return []


def exercise_lessons(checkout=None):
    """The lesson numbers ("00", "01", ...) that have exercises: one notebook each."""
    return sorted({stem[2:4] for stem in exercise_names(course_checkout(checkout))})


def exercises_notebook(lesson, checkout=None):
    """The exercises notebook of lesson ``lesson`` (an int or "NN") as an ``nbformat`` v4
    NotebookNode, without outputs: a markdown cell naming the files and functions, a cell that
    loads the student's file(s), a cell that runs the checks. Refuses a lesson without exercises."""
    import nbformat

    checkout = course_checkout(checkout)
    stems = exercise_names(checkout, only=[lesson])
    number = stems[0][2:4]
    lines = [f"# Lesson {number}: exercises", "",
             "Write your answers in the file(s) below (each function's body raises `NotImplementedError` "
             "until you do), then run this notebook's cells. They load your file afresh and run the course's "
             f"own checks, `tests/exercises/test_exNN.py`, as `TINYMEM_EXERCISES=student python -m pytest -m "
             f"exercise_{number}` does, in a separate process. It needs a clone of tinymem installed with "
             "`pip install -e .` (the checks live in its `tests/`).", ""]
    for stem in stems:
        lines.append(f"**`lessons/exercises/{stem}.py`**")
        lines += [f"- `{name}`" + (f": {doc}" if doc else "") for name, doc in _functions(stem, checkout)]
        lines.append("")
    load = "\n".join(["from tinymem.course.grade_notebook import check, load_student", ""]
                     + [f"{stem} = load_student({stem!r})  # your lessons/exercises/{stem}.py" for stem in stems]
                     + [f"print({stems[0]}.__file__)"])
    run = f"# one line per check: passed, or the first failing assertion / the exception\nverdicts = check({number!r})"
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("\n".join(lines).strip()),
                                               nbformat.v4.new_code_cell(load), nbformat.v4.new_code_cell(run)])
    notebook.metadata.update({"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                              "language_info": {"name": "python"}})
    return notebook
