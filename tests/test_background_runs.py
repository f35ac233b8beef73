"""The suite's long subprocess runs start at collection and run beside the in-process tests
(tests/background_runs.py): a run's result is waited for when read, a run nobody selected does not
start, and the end of the session kills what still runs instead of waiting for it."""
import subprocess
import sys
import time
import types

import pytest

import background_runs


@pytest.fixture(autouse=True)
def _own_runs(monkeypatch):
    """These tests start and stop runs of their own, never the session's (which run beside them)."""
    monkeypatch.setattr(background_runs, "RUNS", None)
    monkeypatch.setattr(background_runs, "_JOBS", {})
    monkeypatch.setattr(background_runs, "_SUBMITTED", set())


def _module(name, jobs):
    module = types.ModuleType(name)
    module.background_jobs = lambda root: [(key, argv, root, {}) for key, argv in jobs]
    return module


def test_a_run_is_read_when_done_and_only_selected_runs_start():
    module = _module("fake_runs", [("a", [sys.executable, "-c", "print('ran a')"]),
                                   ("b", [sys.executable, "-c", "print('ran b')"])])
    try:
        background_runs.start([(module, ["a"])])
        assert background_runs._SUBMITTED == {("fake_runs", "a")}
        done, cwd = background_runs.results(module)["a"]
        assert done.returncode == 0 and done.stdout == "ran a\n"
        done, _ = background_runs.results(module)["b"]  # not selected: started when read
        assert done.stdout == "ran b\n"
    finally:
        background_runs.stop()


def test_two_modules_may_name_a_run_alike():
    first = _module("fake_first", [("same", [sys.executable, "-c", "print('first')"])])
    second = _module("fake_second", [("same", [sys.executable, "-c", "print('second')"])])
    try:
        background_runs.start([(first, ["same"]), (second, ["same"])])
        assert background_runs.results(first)["same"][0].stdout == "first\n"
        assert background_runs.results(second)["same"][0].stdout == "second\n"
    finally:
        background_runs.stop()


def test_stop_kills_a_running_script_and_cancels_the_rest():
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    module = _module("fake_sleepers", [(f"s{i}", sleep) for i in range(6)])
    background_runs.start([(module, [])])
    runs = background_runs.RUNS
    time.sleep(0.5)
    start = time.perf_counter()
    background_runs.stop()
    assert time.perf_counter() - start < 20
    assert all(future.done() for future, _ in runs._futures.values())


def test_the_tests_that_read_runs_are_collected_last():
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                           "tests/test_lessons.py", "tests/test_smoke.py"], capture_output=True, text=True, timeout=300)
    ids = [line for line in done.stdout.splitlines() if "::" in line]
    readers = [i for i, line in enumerate(ids) if "lesson_runs_in_quick_mode" in line or "prints_an_answer" in line]
    others = [i for i, line in enumerate(ids) if i not in readers]
    assert readers and others and max(others) < min(readers), ids


def test_a_module_that_reads_another_modules_runs_starts_those_and_no_second_set():
    lessons = _module("fake_lessons", [("a", [sys.executable, "-c", "print('ran a')"]),
                                       ("b", [sys.executable, "-c", "print('ran b')"])])
    reader = types.ModuleType("fake_site")
    reader.BACKGROUND_RUNS_OF = lessons  # reads the lessons' runs, as tests/test_course_site.py does
    try:
        background_runs.start([(reader, [])])
        assert background_runs._SUBMITTED == {("fake_lessons", "a"), ("fake_lessons", "b")}
        assert background_runs.results(lessons)["b"][0].stdout == "ran b\n"
    finally:
        background_runs.stop()
