"""Shared test parameters: devices, dtypes with their tolerances, the references (PyTorch,
MPI, the course's notebook and site packages) and what happens when one is missing (a skip, or a failure under ``CI=true``), and the
loading of the exercise checks' answer files."""
import functools
import gc
import importlib.util
import os
import pathlib
import sys
import threading
import time
import types

import numpy as np
import pytest
from hypothesis import settings

import background_runs
import standin_cupy
import tinymem as tm
from tinymem import backend
from tinymem.course import missing_packages
from tinymem.distributed import launch

# Property tests stay cheap (the whole Hypothesis part of the suite takes seconds) and write no
# example database into the checkout; a failing example found once is kept as an @example.
# The default run is derandomized: the same examples every time, so a CI run is reproducible.
# HYPOTHESIS_PROFILE=thorough searches far longer, at random (for hunting new failing examples).
settings.register_profile("tinymem", max_examples=40, deadline=None, database=None, derandomize=True)
settings.register_profile("thorough", max_examples=2000, deadline=None, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "tinymem"))

# Devices are a parameter (needle's _DEVICES): cpu always, cuda when CuPy sees a GPU, and
# "standin": the device "cuda" served by tests/standin_cupy.py, a NumPy-backed CuPy that refuses
# to mix with NumPy arrays, so every CI run has a second device (it skips where a GPU is).
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda), "standin"]

# One tolerance per dtype, written down once (relative, absolute).
TOL = {"float64": (1e-7, 1e-9), "float32": (1e-4, 1e-5), "float16": (1e-2, 1e-3)}



@functools.lru_cache(maxsize=None)
def have_torch():
    """Whether PyTorch imports, asked when the first torch test is set up, not at start-up:
    importing it is 1.7 of the 2.3 CPU seconds this file costs, and a process that runs only
    checks without PyTorch (tinymem course grade starts one per student) need not pay it. An
    import, not a search for the package: a torch that is there but cannot import is missing."""
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True

# A reference that is missing skips its tests on a laptop, but fails them in CI: a run that
# quietly skipped every PyTorch comparison would pass while checking nothing.
CI = os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")

requires_torch = pytest.mark.torch  # skipped (or failed under CI=true) without PyTorch
requires_mpi = pytest.mark.mpi  # skipped (or failed under CI=true) without mpi4py and mpiexec
requires_course = pytest.mark.course  # skipped (or failed under CI=true) without the course extra


def missing_reference(what, install):
    """Skip the running test, or fail it when ``CI`` is set (reference packages are required there)."""
    if CI:
        pytest.fail(f"{what} is missing and CI=true: the reference tests must run, not skip "
                    f"({install})", pytrace=False)
    pytest.skip(f"{what} is not installed ({install})")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if item.get_closest_marker("torch") and not have_torch():
        missing_reference("PyTorch", "pip install .[test]")
    if item.get_closest_marker("mpi") and not launch.mpi_available():
        missing_reference("mpi4py or mpiexec", "pip install .[dist]")
    if item.get_closest_marker("course") and missing_packages():
        missing_reference(f"the course's packages ({', '.join(missing_packages())})", "pip install .[course]")
    if item.get_closest_marker("cuda") and not backend.cuda_available():
        pytest.skip("needs CuPy and a GPU")
    # A test about the CPU itself (tracemalloc, RSS, NumPy's behaviour, a CPU-only design)
    # skips under TINYMEM_DEVICE=cuda, saying why; a marker without its reason is a mistake.


@pytest.fixture(params=DEVICES)
def device(request):
    if request.param != "standin":
        yield request.param
        return
    if backend.cuda_available() and backend.get_cupy().__version__ != standin_cupy.__version__:
        pytest.skip("a GPU is here: the stand-in for one is not needed")
    with standin_cupy.installed():
        yield "cuda"


@pytest.fixture
def standin():
    """The stand-in for CuPy served as "cuda" and made the default device for the test: the
    code under test is given no device and must still make everything there."""
    with standin_cupy.installed(), backend.default_device_as("cuda"):
        yield standin_cupy


def _reads_background_runs(item):
    fixture = getattr(item.module, "BACKGROUND_FIXTURE", None) if hasattr(item, "module") else None
    return fixture is not None and fixture in getattr(item, "fixturenames", ())


def _parameters(item):
    callspec = getattr(item, "callspec", None)
    return callspec.params.values() if callspec is not None else ()


def pytest_collection_modifyitems(session, config, items):
    """The tests that read the background runs (tests/background_runs.py) go last, in the order
    their runs were started, so that the runs have the whole in-process part of the suite to
    finish in."""
    readers = sorted((i for i in items if _reads_background_runs(i)), key=lambda i: getattr(i.module, "BACKGROUND_ORDER", 0))
    items[:] = [i for i in items if not _reads_background_runs(i)] + readers


def pytest_sessionfinish(session, exitstatus):
    background_runs.stop()


def pytest_collection_finish(session):
    """Freeze what is alive once the tests are collected (NumPy, PyTorch, matplotlib,
    Hypothesis and every test module): the ``gc.collect()`` after each test then walks only
    the objects tests made since. Walking the whole heap after each test took about a quarter
    of a second, half of the suite's time. Frozen objects are never collected; a test's own
    garbage is made after this point and is."""
    import matplotlib.pyplot  # noqa: F401  (imported by many tests: frozen with the rest)
    gc.collect()
    gc.freeze()
    # Start the background runs now, beside the in-process tests; not for --collect-only, and
    # not in a pytest-xdist worker, which does not know yet which tests it will be given (its
    # fixture starts them when it first needs them).
    if not session.config.option.collectonly and "PYTEST_XDIST_WORKER" not in os.environ:
        readers = [i for i in session.items if _reads_background_runs(i)]
        background_runs.start([(i.module, list(_parameters(i))) for i in readers])


@pytest.fixture(autouse=True)
def _seed(request):
    # gc.get_referrers does not look at frozen objects: the leak finder, which walks up to a
    # module's globals, runs with the heap thawed (and frozen again after, survivors included).
    whole_heap = request.node.get_closest_marker("whole_heap") is not None
    if whole_heap:
        gc.unfreeze()
    tm.manual_seed(0)
    yield
    gc.collect()
    # What survives a test (module caches, fixtures' objects) is frozen too, so the next test's
    # collections do not walk it again: unfrozen, the survivors of some 3,000 tests piled up and
    # every later gc.collect() walked them (tests/autograd, ops, nn and memory: 46 s -> 39 s).
    # Garbage is collected just above, before the freeze; a whole-heap test thaws everything.
    gc.freeze()


# A thread a test starts must be gone when the test ends: one left running (an unclosed
# prefetcher's worker, a monitor never stopped, a Communicator's watchdog) can register and free
# arrays, or read the ledger, while later tests measure it. A thread gets this long to finish
# after the test returns (a worker told to stop may still be finishing a read).
THREAD_GRACE_S = 2.0
# Threads a library starts once for the whole process, at its first use, and keeps on purpose:
# the test that happens to use it first did not leak them.
# A name here is a prefix: the pool threads are named "background-run_0", "background-run_1", ...
PROCESS_THREADS = {"tqdm_monitor": "tqdm's monitor of slow progress bars, one per process",
                   "background-run": "the pool of tests/background_runs.py, which a test that reads a run not "
                                     "started at collection widens; stopped at the end of the session"}


def threads_left_running(before, grace=THREAD_GRACE_S):
    """The threads alive now that are not in ``before`` (nor in PROCESS_THREADS) and do not end
    within ``grace`` seconds, nor after a garbage collection (an object that stops its thread
    when it dies may be waiting in a reference cycle)."""
    new = [t for t in threading.enumerate() if t not in before and not t.name.startswith(tuple(PROCESS_THREADS))]
    deadline = time.monotonic() + grace
    for thread in new:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    left = [t for t in new if t.is_alive()]
    if left:
        gc.collect()
        for thread in left:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
    return [t for t in left if t.is_alive()]


@pytest.fixture(autouse=True)
def _no_thread_left_running(request):
    """Fail a test that leaves a thread alive that it started (daemon or not), naming it."""
    before = set(threading.enumerate())
    yield
    left = threads_left_running(before)
    if left:
        names = ", ".join(f"{t.name!r} (target {getattr(t, '_target', None)!r}, daemon={t.daemon})" for t in left)
        pytest.fail(f"{request.node.nodeid} left {len(left)} thread(s) running {THREAD_GRACE_S:g} s after it "
                    f"ended: {names}. Close what the test opened (a with-block, or close()/stop() in a finally).",
                    pytrace=False)


def to_np(x):
    return x.numpy() if isinstance(x, tm.Tensor) else backend.to_numpy(x)


def assert_close(actual, expected, dtype="float32", what=""):
    rtol, atol = TOL[str(np.dtype(dtype))]
    np.testing.assert_allclose(to_np(actual), to_np(expected), rtol=rtol, atol=atol, err_msg=what)


# Exercise checks (tests/exercises/), one pytest marker per lesson (as minitorch does).
#
# Each lesson's exercises are functions in ``lessons/exercises/exNN.py`` (the student's file)
# with reference answers in ``lessons/solutions/exNN.py``. TINYMEM_EXERCISES says which of the
# two the checks load: ``solutions`` (the default, so CI proves every check can pass) or
# ``student``. A student checks their own work with
#
#     TINYMEM_EXERCISES=student python -m pytest -m exercise_01
#
# ``exercise("ex01")`` imports the file afresh at every call, so a check that first forbids a
# library function (``forbid``) also catches an answer that imported it at the top of its file.
# ``wrong_answer`` is None except in the graders' self-test (tests/exercises/test_graders.py):
# there the check runs on the reference answers with one known mistake from
# tests/exercises/wrong/ swapped in, and must fail.
LESSONS = pathlib.Path(__file__).resolve().parents[1] / "lessons"
EXERCISE_FOLDERS = {"student": "exercises", "solutions": "solutions"}


def exercise_folder():
    """The folder the exercise checks load, from TINYMEM_EXERCISES: lessons/exercises/ or
    lessons/solutions/, or (as ``tinymem course grade`` sets it) the absolute path of a copy of a
    student's lessons/exercises/."""
    value = os.environ.get("TINYMEM_EXERCISES", "solutions")
    if value in EXERCISE_FOLDERS:
        return LESSONS / EXERCISE_FOLDERS[value]
    if os.path.isabs(value) and os.path.isdir(value):
        return pathlib.Path(value)
    raise pytest.UsageError(
        f"TINYMEM_EXERCISES={value!r} is not understood: set it to 'student' to check your "
        "answers in lessons/exercises/, to 'solutions' (or leave it unset) to check the "
        "reference answers in lessons/solutions/, or to the absolute path of a folder of exNN.py files")


def pytest_configure(config):
    exercise_folder()  # a misspelt TINYMEM_EXERCISES stops the run before anything is checked


def pytest_report_header(config):
    value = os.environ.get("TINYMEM_EXERCISES", "solutions")
    folder = exercise_folder()
    shown = folder.relative_to(LESSONS.parent) if folder.is_relative_to(LESSONS.parent) else folder
    return f"exercise checks: TINYMEM_EXERCISES={value} -> {shown}/ex*.py"


def import_file(path, name, **names):
    """Import the file at ``path`` as a new module, with ``names`` defined in it beforehand."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    vars(module).update(names)
    spec.loader.exec_module(module)
    return module


def load_exercise(name):
    """Import ``lessons/{exercises|solutions}/{name}.py`` as a new module object."""
    folder = exercise_folder()
    return import_file(folder / f"{name}.py", f"{folder.name}_{name}")


def swapped_names(wrong, solution):
    """The functions a wrong-answer module defines itself that the solution also defines."""
    return sorted(n for n, v in vars(wrong).items() if callable(v) and not n.startswith("_")
                  and getattr(v, "__module__", None) == wrong.__name__ and hasattr(solution, n))


def with_wrong_answer(solution, path):
    """The solution module with the functions of the wrong answer at ``path`` swapped in. The
    wrong answer sees the reference answers as ``solution``, so it can state only its mistake."""
    wrong = import_file(path, f"wrong_{path.stem}", solution=solution)
    merged = types.ModuleType(solution.__name__)
    merged.__dict__.update(vars(solution))
    merged.__dict__.update({n: getattr(wrong, n) for n in swapped_names(wrong, solution)})
    return merged


@pytest.fixture
def wrong_answer():
    return None  # the graders' self-test parametrizes it with (exercise name, path)


@pytest.fixture
def exercise(wrong_answer):
    if wrong_answer is None:
        return load_exercise
    name, path = wrong_answer
    return lambda n: with_wrong_answer(load_exercise(n), path) if n == name else load_exercise(n)


def subclasses(cls):
    """Every class below ``cls`` (to forbid a method each optimizer defines for itself)."""
    return {sub for direct in cls.__subclasses__() for sub in {direct} | subclasses(direct)}


def _refusal_code(target):
    """A code object that raises naming ``target``, to put in ``target.__code__`` (it runs with
    the target's globals, so it names nothing but builtins)."""
    def refused(*args, **kwargs):
        raise AssertionError("the exercise asks you to build this yourself; your answer called "
                             + __import__("sys")._getframe().f_code.co_name)
    return refused.__code__.replace(co_name=f"{target.__module__}.{target.__qualname__}")


def forbid_in(monkeypatch, *targets, everywhere=False):
    """Make every name under which tinymem exposes each function or class in ``targets`` raise
    when called, through ``monkeypatch``; ``(owner, "name")`` does it for a method. With
    ``everywhere``, a plain function's code is replaced too, so that a name bound to it before
    (``from tinymem.rl import bytes_per_slot`` at the top of an answer) refuses as well."""

    def refuse(what):
        def refused(*args, **kwargs):
            raise AssertionError(f"the exercise asks you to build this yourself; your answer called {what}")
        return refused

    for target in targets:
        if isinstance(target, tuple):
            monkeypatch.setattr(*target, refuse(f"{target[0].__name__}.{target[1]}"))
            continue
        if everywhere and isinstance(target, types.FunctionType) and target.__closure__ is None:
            monkeypatch.setattr(target, "__code__", _refusal_code(target))
        for name, module in list(sys.modules.items()):
            if module is not None and name.split(".")[0] == "tinymem":
                for attr, value in list(vars(module).items()):
                    if value is target:
                        monkeypatch.setattr(module, attr, refuse(f"{target.__module__}.{target.__qualname__}"))


@pytest.fixture
def forbid(monkeypatch):
    """``forbid(f, ...)``: while the check runs, every name under which tinymem exposes the
    function or class ``f`` raises when called (:func:`forbid_in`). An answer that calls the
    library instead of building the thing fails."""
    return lambda *targets: forbid_in(monkeypatch, *targets)
