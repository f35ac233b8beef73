"""The exercises notebooks (tinymem.course.grade_notebook): valid nbformat, one per lesson with
exercises, naming every function the student writes, and running the checks readably."""
import ast
import functools
import pathlib

import nbformat
import pytest

from tinymem.course import grade_notebook

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "lessons" / "solutions"
LESSONS = sorted({p.stem[2:4] for p in SOLUTIONS.glob("ex*.py")})


def answer_functions(path):
    return [n.name for n in ast.parse(path.read_text()).body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_lessons_notebook_is_valid_and_names_every_exercise(lesson):
    notebook = grade_notebook.exercises_notebook(lesson)
    nbformat.validate(notebook)
    again = nbformat.reads(nbformat.writes(notebook), as_version=4)  # as the site writes and Jupyter reads it
    assert again == notebook
    text, load, run = (cell.source for cell in notebook.cells)
    assert [cell.cell_type for cell in notebook.cells] == ["markdown", "code", "code"]
    assert text.startswith(f"# Lesson {lesson}: exercises") and f"exercise_{lesson}" in text
    for path in sorted(SOLUTIONS.glob(f"ex{lesson}*.py")):
        assert f"lessons/exercises/{path.stem}.py" in text and f"load_student({path.stem!r})" in load
        for name in answer_functions(path):
            assert f"- `{name}`: " in text, (path.stem, name)  # with the first line of its docstring
    assert run.endswith(f"verdicts = check({lesson!r})")
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")


def test_the_lessons_with_exercises_are_those_with_reference_answers():
    assert grade_notebook.exercise_lessons() == LESSONS and "06" in LESSONS and "13" in LESSONS


def test_a_lesson_without_exercises_is_refused():
    with pytest.raises(ValueError, match=r"only: lessons \['99'\] have no exercises; choose among 00"):
        grade_notebook.exercises_notebook(99)


def test_the_notebooks_cells_load_the_file_and_print_one_line_per_check(tmp_path, capsys):
    """The cells of lesson 0's notebook, run as a student runs them, on answers with one mistake
    from tests/exercises/wrong/ (the reference answers otherwise)."""
    folder = tmp_path / "exercises"
    folder.mkdir()
    (folder / "ex00.py").write_text((SOLUTIONS / "ex00.py").read_text()
                                    + (ROOT / "tests/exercises/wrong/ex00_fixed_four_bytes.py").read_text())
    load, run = (cell.source for cell in grade_notebook.exercises_notebook(0).cells[1:])
    space = {}
    exec(load, space)
    assert space["ex00"].__file__ == str(ROOT / "lessons" / "exercises" / "ex00.py")
    space["check"] = functools.partial(space["check"], folder=folder)  # this test's answers, not the checkout's
    capsys.readouterr()
    exec(run, space)
    lines = capsys.readouterr().out.splitlines()
    checks = [line for line in lines if line.startswith("  ")]
    # the mistake (bytes_per_value ignored) fails the three parameter-bytes checks, and only them
    assert lines[0] == f"ex00 (exercises/ex00.py): {len(checks) - 3} of {len(checks)} checks pass -> failed"
    assert [line.split("  [")[0] for line in checks[:3]] == [f"  ✗ test_parameter_bytes[sizes{i}]" for i in range(3)]
    assert checks[0] == "  ✗ test_parameter_bytes[sizes0]  [failed] assert 60 == (60 // 2)"
    assert all(line.startswith("  ✓ test_") for line in checks[3:]) and len(checks) > 5
    assert space["verdicts"] == {"ex00": "failed: test_parameter_bytes[sizes0]: assert 60 == (60 // 2)"}
