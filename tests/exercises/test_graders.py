"""The graders' self-test: every exercise check rejects the plausible wrong answers in wrong/.

One pytest run in a subprocess (plugin ``graders.py``) takes every check against every wrong
answer of its exercise; here each wrong answer must have made at least one check fail, and every
function a student writes must have at least one wrong answer on file.
"""
import ast
import json
import os
import pathlib
import subprocess
import sys

import pytest

import background_runs

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# These exercises carry their own wrong-answer tests beside their checks (test_ex07.py,
# test_ex09_wrong.py, test_ex10.py, test_ex11.py, test_ex12.py), written in their own style.
SELF_TESTED = ("ex07", "ex09", "ex10", "ex11", "ex12")
WRONG = sorted(p for p in (HERE / "wrong").glob("ex*.py") if not p.stem.startswith(SELF_TESTED))
CHECKS = sorted(p for p in HERE.glob("test_ex*.py") if not p.stem[5:].startswith(SELF_TESTED))
SOLUTIONS = sorted(p for p in (ROOT / "lessons" / "solutions").glob("ex*.py") if not p.stem.startswith(SELF_TESTED))


def _env(exercises):
    return dict(os.environ, TINYMEM_EXERCISES=exercises,
                PYTHONPATH=os.pathsep.join([str(ROOT), str(HERE), os.environ.get("PYTHONPATH", "")]))


def run_pytest(args, exercises="solutions", timeout=300):
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env=_env(exercises), capture_output=True, text=True, timeout=timeout)


BACKGROUND_ORDER = 1  # beside the CPU figures
BACKGROUND_FIXTURE = "graded"


def background_jobs(root):
    """The self-test: one pytest run of every check against every wrong answer, started at
    collection beside the in-process tests (tests/background_runs.py)."""
    os.makedirs(root, exist_ok=True)
    report = os.path.join(root, "report.json")
    return [("graded", [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "graders",
                        f"--graders-report={report}", *map(str, CHECKS)], ROOT, _env("solutions"))]


@pytest.fixture(scope="module")
def graded():
    result, _ = background_runs.results(sys.modules[__name__])["graded"]
    report = pathlib.Path(next(a for a in result.args if a.startswith("--graders-report=")).split("=", 1)[1])
    if not report.exists():
        pytest.fail(f"the self-test run did not finish:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return json.loads(report.read_text()), result.stdout


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_the_checks_reject_the_wrong_answer(graded, path):
    report, output = graded
    entry = report[path.stem]
    assert entry["replaces"], f"{path.name} defines no function of {entry['exercise']} to replace"
    assert entry["checks"], f"no check of {entry['exercise']} calls {entry['replaces']}"
    assert entry["failed"], (f"{path.name} ({path.read_text().splitlines()[0]}) passed every check "
                             f"it ran: {entry['passed']}")
    broken = [e for e in entry["errors"] if e.split(":")[0] in ("NameError", "ImportError", "SyntaxError",
                                                                 "ModuleNotFoundError")]
    assert not broken, f"{path.name} is broken rather than wrong: {broken}"


def test_the_self_test_names_the_files_it_checks(graded):
    assert "exercise checks: TINYMEM_EXERCISES=solutions -> lessons/solutions/ex*.py" in graded[1]


def _answer_functions(path):
    return [n.name for n in ast.parse(path.read_text()).body
            if isinstance(n, ast.FunctionDef) and not n.name.startswith("_")]


@pytest.mark.parametrize("solution", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_every_function_a_student_writes_has_wrong_answers_on_file(graded, solution):
    report = graded[0]
    covered = {name for entry in report.values() if entry["exercise"] == solution.stem for name in entry["replaces"]}
    missing = sorted(set(_answer_functions(solution)) - covered)
    assert not missing, f"add a plausible mistake for {solution.stem}.{missing} to tests/exercises/wrong/"


@pytest.mark.parametrize("checks", CHECKS, ids=[p.stem for p in CHECKS])
def test_every_check_loads_the_exercise(checks):
    """A check that never loads the student's file passes on the unsolved stub (one did: it
    asserted only its own premise). Each test of these files takes the ``exercise`` fixture."""
    idle = [n.name for n in ast.parse(checks.read_text()).body if isinstance(n, ast.FunctionDef)
            and n.name.startswith("test_") and "exercise" not in [a.arg for a in n.args.args]]
    assert not idle, f"{checks.name}: {idle} never load the exercise, so they pass on the stub"


@pytest.mark.slow
def test_no_check_passes_on_the_unsolved_stubs():
    """Every check that loads an exercise fails on lessons/exercises/, where each answer still
    raises NotImplementedError (the static test above catches the usual way of missing it)."""
    result = run_pytest(["-q", "-rp", str(HERE), "--ignore", str(HERE / "test_graders.py"), "-k", "not wrong",
                         "--deselect", "tests/exercises/test_ex07.py::test_the_library_is_really_off"],
                        exercises="student", timeout=1200)
    passed = [line for line in result.stdout.splitlines() if line.startswith("PASSED")]
    assert " failed" in result.stdout and not passed, f"checks that pass on the stubs: {passed}"


def test_tinymem_exercises_takes_student_or_solutions_and_nothing_else():
    student = run_pytest(["--collect-only", str(HERE / "test_ex00.py")], exercises="student", timeout=120)
    assert "TINYMEM_EXERCISES=student -> lessons/exercises/ex*.py" in student.stdout
    wrong = run_pytest(["--collect-only", str(HERE / "test_ex00.py")], exercises="answers", timeout=120)
    assert wrong.returncode != 0
    assert "TINYMEM_EXERCISES='answers' is not understood" in wrong.stdout + wrong.stderr


SELF_TESTED_SOLUTIONS = sorted(p for p in (ROOT / "lessons" / "solutions").glob("ex*.py")
                               if p.stem.startswith(SELF_TESTED))


@pytest.mark.parametrize("solution", SELF_TESTED_SOLUTIONS, ids=[p.stem for p in SELF_TESTED_SOLUTIONS])
def test_self_tested_exercises_have_wrong_answers_for_every_function_too(solution):
    """The exercises whose own test files run their wrong answers: each function a student
    writes is the mistaken one of at least one file in wrong/ (read, not run: their tests run them)."""
    mistaken = {name for path in (HERE / "wrong").glob(f"{solution.stem}_*.py") for name in _answer_functions(path)}
    missing = sorted(set(_answer_functions(solution)) - mistaken)
    assert not missing, f"add a plausible mistake for {solution.stem}.{missing} to tests/exercises/wrong/"
