"""Lessons are tests: every lesson runs in quick mode (once, as a notebook, printing what the script
prints; as the script where the course's packages are missing), and writes only where it should."""
import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import background_runs
from tinymem.course import missing_packages
from tinymem.course.build import execute_command

ROOT = pathlib.Path(__file__).resolve().parents[1]
LESSONS = sorted((ROOT / "lessons").glob("[0-9][0-9]_*.py"))


def lesson_env(**extra):
    env = dict(os.environ, TINYMEM_QUICK="1", MPLBACKEND="Agg", **extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return env


BACKGROUND_ORDER = 2  # after the stand-in's runs and the CPU figures, which are longer
BACKGROUND_FIXTURE = "lesson_runs"


# With the course's packages, each lesson runs once as a notebook: the command prints what the
# script prints (tinymem/course/execute.py), and the executed notebook is what
# tests/test_course_site.py renders and opens in Chromium. Without them, as the script (the
# stand-in's runs in tests/test_standin_runs.py always run the scripts).
AS_NOTEBOOK = not missing_packages()


def background_jobs(root):
    """Every lesson in quick mode, each in a fresh empty working folder, which the tests then
    check is still empty (tests/background_runs.py starts them at collection); the notebooks go
    to ``root/notebooks/``."""
    root = pathlib.Path(root)
    return [(lesson, execute_command(lesson, root / "notebooks" / f"{lesson.stem}.ipynb") if AS_NOTEBOOK
             else [sys.executable, str(lesson)], root / lesson.stem / "cwd",
             lesson_env(TINYMEM_LESSON_OUT=str(root / lesson.stem / "out"))) for lesson in LESSONS]


@pytest.fixture(scope="module")
def lesson_runs():
    """``{lesson: (CompletedProcess, its working folder)}``, each lesson waited for when read."""
    return background_runs.results(sys.modules[__name__])


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs_in_quick_mode(lesson, lesson_runs):
    result, cwd = lesson_runs[lesson]
    assert result.returncode == 0, f"{lesson.name} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    assert not list(cwd.iterdir()), f"{lesson.name} wrote into the current directory: {list(cwd.iterdir())}"


def test_every_lesson_writes_where_course_says():
    """No lesson picks its own output folder (one did: "." wrote files into the checkout)."""
    for lesson in sorted((ROOT / "lessons").glob("[0-9][0-9]_*.py")):
        text = lesson.read_text()
        assert "environ.get(\"TINYMEM_LESSON_OUT\"" not in text, f"{lesson.name} reads TINYMEM_LESSON_OUT itself"
        if "OUT" in text.replace("OUTPUT", ""):
            assert "from course import" in text and "OUT" in text.split("from course import")[1].splitlines()[0], \
                f"{lesson.name} writes files but does not take OUT from course.py"


def test_lesson_figures_go_to_a_git_ignored_folder_by_default():
    code = "import course; print(course.OUT)"
    env = lesson_env()
    env.pop("TINYMEM_LESSON_OUT", None)
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "lessons", env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert pathlib.Path(result.stdout.strip()) == ROOT / "lessons" / "out"
    assert "/lessons/out/" in (ROOT / ".gitignore").read_text().splitlines()


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_each_lesson_asks_for_a_prediction_before_it_reveals(lesson):
    text = lesson.read_text()
    assert "predict(" in text and "reveal(" in text, f"{lesson.name} has no predict-then-reveal moment"
    assert text.index("predict(") < text.index("reveal("), f"{lesson.name} reveals before it asks"


NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")


def telling_numbers(text):
    """The numbers of ``text`` with three significant digits or more (1,234 B, 10.96, 0.516): few
    enough to be a measurement rather than a size, a count or a year's digit."""
    numbers = {n.replace(",", "") for n in NUMBER.findall(text)}
    return {n for n in numbers if len(n.replace(".", "").lstrip("0")) >= 3}


def answers_printed_early(stdout):
    """For each MEASURED line: the telling numbers it shares with the output above its PREDICT
    question (those the question itself states are its inputs, not its answer)."""
    early, lines, asked = [], stdout.splitlines(), None
    for i, line in enumerate(lines):
        if line.startswith("PREDICT: "):
            asked = i
        elif line.startswith("MEASURED: ") and asked is not None:
            shown = telling_numbers("\n".join(lines[:asked])) - telling_numbers(lines[asked])
            if telling_numbers(line) & shown:
                early.append((lines[asked], sorted(telling_numbers(line) & shown)))
    return early


def test_an_answer_printed_before_its_question_is_found():
    out = "peak 1,234 B\nPREDICT: the peak of 8 layers?\nMEASURED: 1,234 B\n"
    assert answers_printed_early(out) == [("PREDICT: the peak of 8 layers?", ["1234"])]
    assert answers_printed_early(out.replace("peak 1,234 B", "peak 1,235 B")) == []
    assert answers_printed_early("size 4,096\nPREDICT: at 4,096?\nMEASURED: 4,096 -> 77.5\n") == []


@pytest.mark.parametrize("lesson", LESSONS, ids=[p.stem for p in LESSONS])
def test_no_lesson_prints_an_answer_before_its_question(lesson, lesson_runs):
    result, _ = lesson_runs[lesson]
    assert result.returncode == 0, f"{lesson.name} failed (see test_lesson_runs_in_quick_mode)"
    assert "PREDICT: " in result.stdout and "MEASURED: " in result.stdout, f"{lesson.name} asks nothing"
    assert not answers_printed_early(result.stdout), \
        f"{lesson.name} printed these answers before asking: {answers_printed_early(result.stdout)}"


def _course(code, predict, stdin):
    env = lesson_env(PREDICT=predict)
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT / "lessons", env=env, input=stdin,
                          capture_output=True, text=True, timeout=120)


def test_predict_waits_for_enter_only_when_asked():
    code = "import course; course.predict('how many bytes?'); print('after')"
    closed = _course(code, "1", "")  # standard input closed: nothing to wait for, a note says so
    assert closed.returncode == 0 and "EOFError" not in closed.stderr and "after" in closed.stdout, closed.stderr
    assert "PREDICT: how many bytes?" in closed.stdout and "standard input is closed" in closed.stdout
    answered = _course(code, "1", "\n")
    assert "after" in answered.stdout and "standard input is closed" not in answered.stdout
    quick = _course(code, "", "")
    assert quick.returncode == 0 and "after" in quick.stdout
    wrong = _course(code, "yes", "\n")
    assert wrong.returncode != 0 and "PREDICT='yes' is not understood" in wrong.stderr


def test_a_claim_the_run_contradicts_stops_the_lesson():
    held = _course("import course; course.reveal('3 B', 'three is odd', 3 % 2 == 1)", "", "")
    assert held.returncode == 0 and "MEASURED: 3 B" in held.stdout and "three is odd" in held.stdout
    broken = _course("import course; course.reveal('4 B', 'four is odd', 4 % 2 == 1)", "", "")
    assert broken.returncode != 0 and "the lesson says 'four is odd'" in broken.stderr


def _course_module():
    spec = importlib.util.spec_from_file_location("course_under_test", ROOT / "lessons" / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


NOT_A_TRUTH = {"a tuple of falses": ((False, False), "all"), "an uncalled lambda": (lambda: False, "call it"),
               "a string": ("False", "string"), "a list": ([False], "all"), "NaN": (float("nan"), "number"),
               "a NumPy NaN": (np.float64("nan"), "number"), "one": (1, "number"),
               "two booleans": (np.array([True, False]), r"shape \(2,\).*\.all\(\)"),
               "two trues": (np.array([True, True]), "shape"), "None": (None, "NoneType"),
               "a 1-element array": (np.array([True]), "shape"),
               "a 0-d integer array": (np.array(1), r"a single int64 value: compare it"),
               "a 0-d float array": (np.array(0.5), r"a single float64 value"),
               "a masked boolean": (np.ma.array(True, mask=True), "masked value"),
               "the masked constant": (np.ma.masked, "masked value")}


@pytest.mark.parametrize("holds, says", NOT_A_TRUTH.values(), ids=list(NOT_A_TRUTH))
def test_only_true_or_false_can_check_a_claim(holds, says, capsys):
    course = _course_module()
    for call in (lambda: course.check("the claim", holds), lambda: course.reveal("3 B", "the claim", holds)):
        with pytest.raises(TypeError, match=f"the lesson checks 'the claim' with .*{says}") as caught:
            call()
        assert "must be True or False" in str(caught.value)
        assert "checked on this run" not in capsys.readouterr().out


def test_a_bool_a_numpy_bool_and_a_0d_boolean_array_check_a_claim(capsys):
    course = _course_module()
    for holds in (True, np.True_, np.array(3) > 2, np.float64(1.5) < 2):
        course.check("holds", holds)
    assert capsys.readouterr().out.count("checked on this run: holds") == 4
    for holds in (False, np.False_, np.array(False)):
        with pytest.raises(AssertionError, match="this run contradicts it"):
            course.check("fails", holds)


def test_a_0d_boolean_tensor_checks_a_claim(capsys, standin):
    import tinymem as tm
    course = _course_module()
    course.check("holds", tm.tensor(np.array(True)))
    course.check("holds", tm.tensor(np.array([1.0, 2.0])).data.max() > 1)  # a device 0-d boolean
    assert capsys.readouterr().out.count("checked on this run: holds") == 2
    with pytest.raises(AssertionError, match="this run contradicts it"):
        course.check("fails", tm.tensor(np.array(False), device="cuda"))


def test_predict_goes_on_when_standard_input_is_not_even_open():
    code = "import course; course.predict('how many bytes?'); print('after')"
    closed = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "lessons", env=lesson_env(PREDICT="1"),
                            capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.close(0))
    assert closed.returncode == 0 and "after" in closed.stdout, closed.stderr
    assert "standard input is closed" in closed.stdout
