"""One student's checks process: ``python -m tinymem.course.grade_child RESULTS WRITABLE -- PYTEST_ARGS``.

Started by :mod:`tinymem.course.grade_run`, never by hand. Before any of the student's code runs
it confines the process's writes to the folder ``WRITABLE`` and /dev/shm (:mod:`grade_landlock`,
where the kernel allows it), then runs pytest on the course's own checks with a plugin that appends one
JSON line per event to ``RESULTS``, flushed at once, so that what finished before a time limit
or a crash is kept:

- ``{"start": nodeid}`` when a check begins;
- ``{"done": nodeid, "outcome": "passed"|"failed"|"error"|"skipped", "message": ...}`` when it
  ends: ``failed`` for an AssertionError (the check's verdict), ``error`` for any other
  exception (the answer did not run), with the exception's first line as the message.

Memory cost: pytest's and the checks' own; each line is at most a few hundred bytes.
"""
import json
import os
import sys

import pytest

from .grade_landlock import confine_writes

MESSAGE_CHARS = 300  # a student's assertion message may be megabytes: keep its start


def first_line(exc):
    """``Type: first line of the message``, cut to MESSAGE_CHARS."""
    text = str(exc).strip().splitlines()
    line = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    if isinstance(exc, AssertionError) and text:
        line = text[0]  # "assert 3 == 4" or the check's own sentence
    return line[:MESSAGE_CHARS]


class Recorder:
    """The pytest plugin that writes the JSON lines (see the module's docstring)."""

    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")
        self.verdicts = {}

    def write(self, **entry):
        self.file.write(json.dumps(entry) + "\n")
        self.file.flush()

    def pytest_runtest_logstart(self, nodeid):
        self.write(start=nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = (yield).get_result()
        if call.excinfo is not None and report.failed and item.nodeid not in self.verdicts:
            exc = call.excinfo.value
            outcome = "failed" if isinstance(exc, AssertionError) else "error"
            self.verdicts[item.nodeid] = (outcome, first_line(exc))

    def pytest_runtest_logfinish(self, nodeid):
        outcome, message = self.verdicts.get(nodeid, ("passed", ""))
        self.write(done=nodeid, outcome=outcome, message=message)

    def pytest_runtest_logreport(self, report):
        if report.skipped and report.when in ("setup", "call"):
            self.verdicts.setdefault(report.nodeid, ("skipped", ""))


def main(argv):
    results, writable, dash, *pytest_args = argv
    if dash != "--":
        raise SystemExit("usage: python -m tinymem.course.grade_child RESULTS WRITABLE -- PYTEST_ARGS")
    # /dev/shm too: shared memory is how processes share (multiprocessing's semaphores, the
    # simulated device two jobs share in lesson 9's checks); it holds no file of the course's
    folders = [writable] + (["/dev/shm"] if os.path.isdir("/dev/shm") else [])
    confined = confine_writes(folders) if os.environ.get("TINYMEM_GRADE_CONFINE") == "1" else None
    recorder = Recorder(results)
    recorder.write(confined=confined)
    return pytest.main(pytest_args, plugins=[recorder])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
