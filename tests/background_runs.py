"""The suite's long runs in other processes start as soon as the tests are collected, and run
beside the in-process tests instead of after them.

Every lesson on the CPU (tests/test_lessons.py), and every lesson and figure family on the CuPy
stand-in (tests/test_standin_runs.py), is a single-threaded script of seconds to a minute. The
in-process tests are single-threaded too, so while they ran the second core was idle, and the
scripts then ran alone at the end: on a 2-core machine that made the default run about 13.5
minutes. Here the scripts start at collection on a pool as wide as the machine, longest first
(the order their module gives); the tests that read them are moved to the end of the run
(``conftest.pytest_collection_modifyitems``) and wait only for the run they read.

A test module takes part by defining ``BACKGROUND_FIXTURE`` (the name of the fixture its tests
read the runs through) and ``background_jobs(root)``: the runs, each ``(key, argv, cwd, env)``,
where ``key`` is the parameter of the tests that read it. Only the runs of selected tests start,
so ``pytest tests/planner`` starts nothing and ``pytest -k 03_`` only lesson 03. A module whose
tests read another module's runs names that module in ``BACKGROUND_RUNS_OF`` (and uses its fixture). At the end of the session whatever has not run is cancelled and what is running
is killed (``pytest -x`` stops at once instead of waiting for the scripts).
"""
import concurrent.futures
import os
import shutil
import subprocess
import tempfile
import threading

TIMEOUT_S = 600  # one script; a run past it fails its test with "timed out"


class BackgroundRuns:
    """Scripts run in a thread pool, each a subprocess; ``result(key)`` waits for one."""

    def __init__(self, width):
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=width, thread_name_prefix="background-run")
        self._futures, self._running, self._lock, self._closed = {}, set(), threading.Lock(), False
        self.root = tempfile.mkdtemp(prefix="tinymem-background-")

    def submit(self, key, argv, cwd, env):
        self._futures[key] = self._pool.submit(self._run, argv, cwd, env), cwd

    def _run(self, argv, cwd, env):
        with self._lock:
            if self._closed:
                return subprocess.CompletedProcess(argv, -15, "", "not run: the session ended first")
            os.makedirs(cwd, exist_ok=True)
            process = subprocess.Popen(argv, cwd=cwd, env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            self._running.add(process)
        try:
            out, err = process.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            out, err = process.communicate()
            err = f"{err}\ntimed out after {TIMEOUT_S} s: {argv}"
        finally:
            with self._lock:
                self._running.discard(process)
        return subprocess.CompletedProcess(argv, process.returncode, out, err)

    def result(self, key):
        """``(CompletedProcess, its working folder)`` of run ``key``, once it has finished."""
        future, cwd = self._futures[key]
        return future.result(), cwd

    def close(self):
        """Cancel what has not started, kill what runs, wait for the pool, remove the folders."""
        with self._lock:
            self._closed = True
            for process in self._running:
                process.kill()
        for future, _ in self._futures.values():
            future.cancel()
        self._pool.shutdown(wait=True)
        shutil.rmtree(self.root, ignore_errors=True)


RUNS = None  # the session's BackgroundRuns, made when a run is first wanted
_JOBS = {}  # module name -> {key: (argv, cwd, env)} of all its runs
_SUBMITTED = set()  # (module name, key) of each run submitted: two modules may both have a run "checkpoint"


def _jobs_of(module):
    global RUNS
    if RUNS is None:
        RUNS = BackgroundRuns(width=max(1, min(8, os.cpu_count() or 1)))
    if module.__name__ not in _JOBS:
        folder = os.path.join(RUNS.root, module.__name__.rsplit(".", 1)[-1])
        _JOBS[module.__name__] = {key: (argv, cwd, env) for key, argv, cwd, env in module.background_jobs(folder)}
    return _JOBS[module.__name__]


def _submit(module_name, key):
    if (module_name, key) not in _SUBMITTED:
        _SUBMITTED.add((module_name, key))
        RUNS.submit((module_name, key), *_JOBS[module_name][key])


def start(readers):
    """Submit the runs that the selected tests read: ``readers`` is ``[(module, parameters)]``,
    one per selected test, modules in the order their runs should start. A test whose
    parameters name runs of its module reads those (``pytest -k 03_`` starts lesson 03's);
    any other reads all of its module's runs."""
    for module, parameters in readers:
        module = getattr(module, "BACKGROUND_RUNS_OF", module)
        jobs = _jobs_of(module)
        named = [value for value in parameters if _hashable(value) and value in jobs]
        for key in named or list(jobs):
            _submit(module.__name__, key)


def _hashable(value):
    try:
        hash(value)
    except TypeError:
        return False
    return True


def results(module):
    """``{key: (CompletedProcess, its working folder)}`` of ``module``'s runs, each waited for
    when it is read, and started then if it was not started at collection (under pytest-xdist a
    worker does not know at collection which tests it will be given, and starts nothing then)."""
    _jobs_of(module)
    return _Waiting(module.__name__)


class _Waiting(dict):
    def __init__(self, module_name):
        super().__init__()
        self._module = module_name

    def __missing__(self, key):
        _submit(self._module, key)
        self[key] = RUNS.result((self._module, key))
        return self[key]


def stop():
    """Cancel and kill what is left (at the end of the session)."""
    global RUNS
    if RUNS is not None:
        RUNS.close()
        RUNS = None
    _JOBS.clear()
    _SUBMITTED.clear()
