"""A lesson executed as a notebook (tinymem/course/execute.py) prints what the script prints,
keeps its figures and its folded answers in the notebook, and a failed check names its line."""
import os
import pathlib
import subprocess
import sys

import pytest

from conftest import requires_course
from tinymem.course.build import execute_command

ROOT = pathlib.Path(__file__).resolve().parents[2]

TINY = '''# %% [markdown]
# # Lesson 98 - a test lesson
# It walks through `tinymem/plots.py`.

# %%
from tinymem import plots
from course import OUT, RECORDS, predict, reveal
predict("how much is 6 * 7?")
reveal(f"{6 * 7} <b>", "six times seven is 42", 6 * 7 == 42)

# %%
fig, ax = plots.new_figure()
ax.plot([1, 2], [3, 4])
print("wrote", plots.save(fig, RECORDS, OUT, "tiny.png"))
'''

FAILS = '''# %% [markdown]
# # Lesson 97 - a claim the run contradicts

# %%
print("before the claim")
from course import check
check("two is odd", 2 % 2 == 1)
'''


def _run(argv, tmp_path, out):
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    env = dict(os.environ, TINYMEM_QUICK="1", MPLBACKEND="Agg", TINYMEM_LESSON_OUT=str(out))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "lessons"), env.get("PYTHONPATH", "")])
    env.pop("PREDICT", None)
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert not list(cwd.iterdir()), f"wrote into the working folder: {list(cwd.iterdir())}"
    return done


@requires_course
def test_a_lesson_as_a_notebook_prints_what_the_script_prints_and_keeps_its_figure(tmp_path):
    import nbformat

    lesson = tmp_path / "98_tiny.py"
    lesson.write_text(TINY)
    script = _run([sys.executable, str(lesson)], tmp_path, tmp_path / "out")
    assert script.returncode == 0, script.stderr
    (tmp_path / "out" / "tiny.png").unlink()
    notebook_path = tmp_path / "nb" / "98_tiny.ipynb"
    run = _run(execute_command(lesson, notebook_path), tmp_path, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    assert run.stdout == script.stdout  # the transcript the lesson tests read
    assert "PREDICT: how much is 6 * 7?" in run.stdout and "MEASURED: 42 <b>" in run.stdout
    notebook = nbformat.read(notebook_path, as_version=4)
    nbformat.validate(notebook)
    setup, title, asks, draws = notebook.cells
    assert setup.metadata.tags == ["remove-cell"] and title.cell_type == "markdown"
    question, answer = (o.data["text/html"] for o in asks.outputs)
    assert 'class="tinymem-predict"' in question and "how much is 6 * 7?" in question
    assert answer.startswith('<details class="tinymem-measured"') and "<details open" not in answer
    assert "42 &lt;b&gt;" in answer and "checked on this run: six times seven is 42" in answer  # escaped, folded
    shown = [o for o in draws.outputs if "image/png" in o.get("data", {})]
    assert len(shown) == 1 and shown[0].metadata["tinymem_figure"] == "tiny.png"
    assert shown[0].data["image/png"] == __import__("base64").b64encode(
        (tmp_path / "out" / "tiny.png").read_bytes()).decode()


@requires_course
def test_a_failed_check_names_the_lesson_line_and_cell_and_keeps_the_notebook(tmp_path):
    import nbformat

    lesson = tmp_path / "97_fails.py"
    lesson.write_text(FAILS)
    notebook_path = tmp_path / "97_fails.ipynb"
    run = _run(execute_command(lesson, notebook_path), tmp_path, tmp_path / "out")
    assert run.returncode == 1
    assert run.stdout == "before the claim\n"
    assert run.stderr.strip().splitlines()[-1] == (
        f"{lesson} line 7 (notebook cell 2, which begins `print(\"before the claim\")`) raised AssertionError: "
        "the lesson says 'two is odd', and this run contradicts it")
    assert "Traceback" in run.stderr or "AssertionError" in run.stderr.splitlines()[0]
    failed = nbformat.read(notebook_path, as_version=4).cells[2]
    assert [o.output_type for o in failed.outputs] == ["stream", "error"]


def test_a_lesson_that_is_not_there_is_refused_and_nothing_is_written(tmp_path):
    done = subprocess.run(execute_command(tmp_path / "missing.py", tmp_path / "nb.ipynb"),
                          capture_output=True, text=True, timeout=120, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 2 and "missing.py' is not a file" in done.stderr
    assert not list(tmp_path.iterdir())


WARNS = '''# %% [markdown]
# # Lesson 96 - a lesson that warns

# %%
import warnings
import course
warnings.warn("label '1' sits on the data", UserWarning)
'''


@requires_course
def test_a_warning_in_a_notebook_does_not_name_the_kernels_temporary_file(tmp_path):
    import nbformat

    lesson = tmp_path / "96_warns.py"
    lesson.write_text(WARNS)
    run = _run(execute_command(lesson, tmp_path / "96.ipynb"), tmp_path, tmp_path / "out")
    assert run.returncode == 0, run.stderr
    shown = "".join(o.get("text", "") for c in nbformat.read(tmp_path / "96.ipynb", as_version=4).cells
                    for o in c.get("outputs", []))
    assert shown == "UserWarning: label '1' sits on the data\n"  # not /tmp/ipykernel_PID/HASH.py:3: UserWarning
    assert run.stderr == shown
