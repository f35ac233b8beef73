"""pytest plugin for the graders' self-test: each exercise check, run against known wrong answers.

``python -m pytest -p graders --graders-report=PATH tests/exercises/test_ex01.py ...`` (with
this folder on PYTHONPATH; test_graders.py does it) parametrizes every check that takes the
``exercise`` fixture with the files ``wrong/exNN_*.py`` of its exercise. Each such file holds
one plausible mistake: functions with the names of the reference answer's, which replace them.
Only the checks whose source names a replaced function run, and once one of them has failed
the rest are skipped (the answer is caught). PATH receives, per wrong answer, the checks that
ran, those that failed (with the error each raised) and those that passed. A wrong-answer file
sees the reference answers as ``solution`` (tests/conftest.py puts it there), so that it can
state only its mistake.
"""
import gc
import importlib.util
import inspect
import json
import pathlib
import re

import pytest

WRONG = pathlib.Path(__file__).resolve().parent / "wrong"
SOLUTIONS = pathlib.Path(__file__).resolve().parents[2] / "lessons" / "solutions"


def exercise_of(path):
    """The exercise a wrong-answer file belongs to: the longest solution name that prefixes it."""
    names = [p.stem for p in SOLUTIONS.glob("ex*.py") if path.stem.startswith(p.stem + "_")]
    if not names:
        raise ValueError(f"{path.name}: name it after its exercise, e.g. ex01_what_goes_wrong.py")
    return max(names, key=len)


def wrong_answers(exercise):
    return [p for p in sorted(WRONG.glob(f"{exercise}_*.py")) if exercise_of(p) == exercise]


def replaced_functions(path):
    """Names of the public functions the wrong answer defines itself."""
    spec = importlib.util.spec_from_file_location(f"wrong_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return sorted(n for n, v in vars(module).items() if inspect.isfunction(v) and not n.startswith("_")
                  and v.__module__ == module.__name__)


def pytest_addoption(parser):
    parser.addoption("--graders-report", help="where the graders' self-test writes its JSON report")


# One process runs one self-test: per wrong answer its entry, and the entry of each check's node.
ENTRIES, OWNER = {}, {}


def pytest_generate_tests(metafunc):
    if "wrong_answer" not in metafunc.fixturenames:
        return
    exercise = metafunc.module.__name__.split("test_", 1)[-1]
    paths = wrong_answers(exercise)
    metafunc.parametrize("wrong_answer", [(exercise, p) for p in paths], ids=[p.stem for p in paths])


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for path in sorted(WRONG.glob("ex*.py")):
        ENTRIES[path.stem] = {"exercise": exercise_of(path), "replaces": replaced_functions(path),
                                       "checks": [], "failed": [], "passed": [], "errors": []}
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if not isinstance(params.get("wrong_answer"), tuple):  # a check of an exercise with none on file
            drop.append(item)
            continue
        entry = ENTRIES[params["wrong_answer"][1].stem]
        source = inspect.getsource(item.function)
        if any(re.search(rf"\b{name}\b", source) for name in entry["replaces"]):
            entry["checks"].append(item.nodeid)
            OWNER[item.nodeid] = entry
            keep.append(item)
        else:
            drop.append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep
    # Every check ends with a full garbage collection (tests/conftest.py); with PyTorch and
    # tinymem imported that costs a quarter of a second each. Freezing what exists now (the
    # modules, the collected tests) leaves the collector only what each check makes.
    gc.freeze()


def pytest_runtest_setup(item):
    entry = OWNER.get(item.nodeid)
    if entry is not None and entry["failed"]:
        pytest.skip("this wrong answer is already caught by an earlier check")


def pytest_runtest_logreport(report):
    entry = OWNER.get(report.nodeid)
    if entry is None or report.skipped:
        return
    if report.failed:
        entry["failed"].append(report.nodeid)
        crash = getattr(report.longrepr, "reprcrash", None)
        entry["errors"].append(crash.message if crash is not None else str(report.longrepr)[-300:])
    elif report.when == "call":
        entry["passed"].append(report.nodeid)


def pytest_sessionfinish(session):
    path = session.config.getoption("--graders-report")
    if path:
        pathlib.Path(path).write_text(json.dumps(ENTRIES, indent=1))
