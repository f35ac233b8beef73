"""One student's checks, run in a child process with limits, read back as one verdict per exercise.

:func:`check_student` runs ``python -m pytest`` on the course's own checks
(``tests/exercises/test_exNN.py``, selected by their ``exercise_NN`` markers, exactly as
``TINYMEM_EXERCISES=student python -m pytest -m exercise_NN`` does for one student) with
``TINYMEM_EXERCISES`` pointing at a scratch copy of the student's ``lessons/exercises/``. The
child (:mod:`grade_child`) runs:

- in its own session, with the scratch folder as its working directory and HOME and TMPDIR;
- under a wall-clock limit per exercise file, counted from its first check (the child's whole
  process group is killed when one exercise runs past it; pytest's start-up, which runs no
  student code, has STARTUP_LIMIT), an address
  space limit (RLIMIT_AS: an allocation past it raises MemoryError), a 256 MiB limit on any one
  file it writes (RLIMIT_FSIZE) and no core dumps;
- with its output read through a pipe of which only the first OUTPUT_KEPT bytes are kept, so
  that megabytes of prints cost neither memory nor disk;
- with writes confined to its own run folder by Landlock where the kernel has it (grade_landlock).

When the limit kills the child, the exercise whose check was running is ``timeout`` and the
student's exercises not yet reached run again in a fresh child with a fresh limit, so one endless
loop costs one exercise, not the row.

Memory cost: OUTPUT_KEPT bytes of output and the results file's lines per student.
"""
import json
import os
import pathlib
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

OUTPUT_KEPT = 64 << 10
FILE_LIMIT = 256 << 20
RESULTS_READ = 4 << 20
STARTUP_LIMIT = 600  # seconds for pytest to import the checks and reach the first one


def memory_ceiling_mb():
    """The largest address-space limit (in MB) a child can be given: this process's hard limit,
    or what setrlimit's signed 64-bit value can hold."""
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    return (hard if hard != resource.RLIM_INFINITY else (1 << 63) - 1) >> 20


def _limits(memory_bytes):
    """The child's resource limits, set between fork and exec."""
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT, FILE_LIMIT))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


class _CappedReader(threading.Thread):
    """Drains a pipe, keeping its first OUTPUT_KEPT bytes and counting the rest."""

    def __init__(self, pipe):
        super().__init__(daemon=True)
        self.pipe, self.kept, self.total = pipe, bytearray(), 0

    def run(self):
        while chunk := self.pipe.read1(1 << 16):
            self.total += len(chunk)
            if len(self.kept) < OUTPUT_KEPT:
                self.kept += chunk[: OUTPUT_KEPT - len(self.kept)]
        self.pipe.close()


def _environment(checkout, run_dir, exercises, confine):
    home, tmp = run_dir / "home", run_dir / "tmp"
    home.mkdir(exist_ok=True)
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, HOME=str(home), TMPDIR=str(tmp), MPLCONFIGDIR=str(home), MPLBACKEND="Agg",
               PYTHONPATH=os.pathsep.join(filter(None, [str(checkout), os.environ.get("PYTHONPATH")])),
               PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               TINYMEM_EXERCISES=str(exercises), TINYMEM_GRADE_CONFINE="1" if confine else "0")
    # One thread per BLAS: students run one after another (or --jobs side by side), not in a pool
    env.update({k: "1" for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    return env


def _read_results(path):
    """The child's JSON lines, from the first RESULTS_READ bytes (a line that is not JSON is skipped)."""
    if not path.is_file():  # the student may have replaced it (a folder would raise, a pipe block)
        return []
    with open(path, "rb") as f:  # the child could write up to FILE_LIMIT into it: read a bounded start
        return [e for e in map(_entry, f.read(RESULTS_READ).splitlines()) if e]


def _entry(line):
    """One JSON line as a dict ({} for a line that is not one)."""
    try:
        entry = json.loads(line)
    except ValueError:
        return {}
    return entry if isinstance(entry, dict) else {}


def _stem_of(nodeid):
    """``tests/exercises/test_ex05.py::test_x[a]`` -> ``ex05``."""
    return nodeid.split("::")[0].rsplit("/", 1)[-1].removeprefix("test_").removesuffix(".py")


def _how_it_ended(returncode):
    if returncode < 0:
        named = {int(s): s.name for s in signal.Signals}  # real-time signals (SIGRTMIN+1, ...) have no name
        name = named.get(-returncode, f"signal {-returncode}")
        return f"killed by {name}" + (" (a file past 256 MiB)" if name == "SIGXFSZ" else "")
    return f"exit status {returncode}"


def _wait(child, results, timeout):
    """Wait for ``child``; True when one exercise's checks ran past ``timeout`` seconds. The clock
    starts again at the first check of each exercise file; pytest's start-up, which runs no
    student code and costs the same for every student, has STARTUP_LIMIT instead."""
    deadline, offset, stem = time.monotonic() + STARTUP_LIMIT, 0, None
    while child.poll() is None:
        if results.is_file() and offset < RESULTS_READ:
            with open(results, "rb") as f:
                f.seek(offset)
                new = f.read(RESULTS_READ - offset)
            complete = new[: new.rfind(b"\n") + 1]
            offset += len(complete)
            for line in complete.splitlines():
                nodeid = _entry(line).get("start")
                if isinstance(nodeid, str) and _stem_of(nodeid) != stem:
                    stem, deadline = _stem_of(nodeid), time.monotonic() + timeout
        if time.monotonic() > deadline:
            return True
        time.sleep(0.05)
    return False


def _one_child(checkout, run_dir, stems, timeout, memory_mb, confine):
    """Run the checks of ``stems`` once: (entries, timed_out, returncode, reader)."""
    results = run_dir / "results.jsonl"
    results.unlink(missing_ok=True)
    tests = checkout / "tests" / "exercises"
    markers = " or ".join(sorted({f"exercise_{s[2:4]}" for s in stems}))
    command = [sys.executable, "-m", "tinymem.course.grade_child", str(results), str(run_dir), "--",
               "-p", "no:cacheprovider", "-q", "-s", "--tb=no", "--no-header", "--rootdir", str(checkout),
               "-c", str(checkout / "pyproject.toml"), "-m", markers, *[str(tests / f"test_{s}.py") for s in stems]]
    work = run_dir / "work"
    env = _environment(checkout, run_dir, work / "lessons" / "exercises", confine)
    child = subprocess.Popen(command, cwd=work, env=env,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             start_new_session=True, preexec_fn=_limits(memory_mb << 20))
    reader = _CappedReader(child.stdout)
    reader.start()
    try:
        timed_out = _wait(child, results, timeout)
    finally:
        try:
            os.killpg(child.pid, signal.SIGKILL)  # the child and whatever it started
        except ProcessLookupError:
            pass
        child.wait()
        reader.join(5)
    return _read_results(results), timed_out, child.returncode, reader


def _judge(entries, timed_out, returncode, output, remaining, verdicts, checks):
    """Fill ``verdicts`` and ``checks`` from one child's run; the exercises it finished."""
    started = [e["start"] for e in entries if isinstance(e.get("start"), str)]
    done = {e["done"]: e for e in entries if isinstance(e.get("done"), str)}
    running = next((n for n in reversed(started) if n not in done), None)
    for nodeid, entry in done.items():
        stem, test = _stem_of(nodeid), nodeid.split("::", 1)[-1]
        outcome, message = str(entry.get("outcome")), str(entry.get("message", ""))[:300]
        checks.append((stem, test, outcome, message))
        if stem in remaining and stem not in verdicts and outcome in ("failed", "error"):
            verdicts[stem] = f"{outcome}: {test}: {message}"
    if running is not None:
        stem, test = _stem_of(running), running.split("::", 1)[-1]
        ended = f"the checks' process ended ({_how_it_ended(returncode)})"
        checks.append((stem, test, "timeout" if timed_out else "error", "" if timed_out else ended))
        verdicts.setdefault(stem, "timeout" if timed_out else f"error: {test}: {ended}")
        # exercises before the one that was running are complete; those after it run again
        return remaining[: remaining.index(stem) + 1] if stem in remaining else remaining
    reached = {_stem_of(n) for n in started}
    for stem in remaining:
        if timed_out:  # killed between checks, or before the first (start-up past STARTUP_LIMIT)
            verdicts.setdefault(stem, "timeout" if started else
                                f"error: pytest did not reach the first check in {STARTUP_LIMIT} s")
        elif stem not in reached:
            tail = output.strip().splitlines()[-1:] or [""]
            verdicts.setdefault(stem, f"error: no check ran ({_how_it_ended(returncode)}: {tail[0][:200]})")
    return remaining


def check_student(checkout, run_dir, stems, timeout, memory_mb, confine):
    """Grade the exercises ``stems`` of the student copied to ``run_dir/work/lessons/exercises``:
    ``(verdicts, notes, checks)`` with verdicts ``{stem: "passed" | "failed: ..." | "error: ..." |
    "timeout"}``, notes a list of sentences (output printed, confinement) and checks the list of
    ``(stem, check, outcome, message)`` of every check that ran, in order."""
    verdicts, notes, checks, printed, remaining = {}, [], [], 0, list(stems)
    while remaining:
        entries, timed_out, returncode, reader = _one_child(checkout, run_dir, remaining, timeout, memory_mb, confine)
        printed += reader.total
        output = bytes(reader.kept).decode(errors="replace")
        finished = _judge(entries, timed_out, returncode, output, remaining, verdicts, checks)
        for stem in finished:
            verdicts.setdefault(stem, "passed")
        remaining = [s for s in remaining if s not in finished]
        if confine and not any(e.get("confined") for e in entries):
            notes.append("writes were not confined (the child did not report Landlock)")
    if printed > OUTPUT_KEPT:
        notes.append(f"printed {printed / 1e6:.1f} MB (not kept)")
    return verdicts, notes, checks


def _remove(folder):
    """Remove a run folder, whatever the student left in it: shutil.rmtree recurses once per
    level, so thousands of nested folders raise RecursionError; ``rm -rf`` walks them without."""
    try:
        shutil.rmtree(folder)
    except RecursionError:
        subprocess.run(["rm", "-rf", "--", str(folder)], check=True)


def check_folder(checkout, folder, stems, timeout, memory_mb, confine):
    """:func:`check_student` on a scratch copy of ``folder`` (a student's lessons/exercises/), in a
    temporary run folder removed afterwards."""
    run_dir = pathlib.Path(tempfile.mkdtemp(prefix="tinymem-check-")).resolve()
    try:
        shutil.copytree(folder, run_dir / "work" / "lessons" / "exercises", symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__"))
        return check_student(checkout, run_dir, stems, timeout, memory_mb, confine)
    finally:
        _remove(run_dir)
