"""``tinymem course build``: execute every lesson once as a notebook, then render the site.

    tinymem course build [--quick] [--out DIR] [--only NN ...] [--jobs N] [--timeout S]
                         [--source-url URL] [--notebooks DIR]

Writes ``DIR/notebooks/NN_*.ipynb`` (each lesson with its outputs), ``exercises_NN.ipynb`` (each
lesson's exercises, to run on a student's own files) and ``DIR/site/`` (open
``DIR/site/index.html``); ``DIR`` is ``course_site/`` (``course_site/quick/`` with ``--quick``),
git-ignored. Every ``lessons/NN_*.py`` is a lesson: a new one is picked up without a list to
edit. Each lesson runs in its own process (:mod:`tinymem.course.execute`) in an empty scratch
folder, under a time limit; a lesson that fails stops the build before any page is written and
names its cell. ``--notebooks DIR`` renders notebooks already executed there (the test suite
shares its lesson runs this way) instead of running the lessons.
"""
import concurrent.futures
import math
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse

ROOT = pathlib.Path(__file__).resolve().parents[2]
LESSONS = ROOT / "lessons"
QUICK_TIMEOUT_S, FULL_TIMEOUT_S = 600, 3600  # one lesson, all its cells
KERNEL_GRACE_S = 60  # on top: starting and stopping its kernel


def lessons(only=None):
    """The lesson scripts (``lessons/NN_*.py``), all or those whose number ``only`` names."""
    found = sorted(LESSONS.glob("[0-9][0-9]_*.py"))
    if not only:
        return found
    numbers = [str(n).zfill(2) for n in only]
    unknown = [n for n in numbers if not any(p.name.startswith(f"{n}_") for p in found)]
    if unknown:
        raise ValueError(f"--only {' '.join(unknown)}: no lesson has that number; the lessons are "
                         f"{', '.join(sorted({p.name[:2] for p in found}))}")
    return [p for p in found if p.name[:2] in numbers]


def lesson_env(quick, out):
    """The environment a lesson's kernel runs in: the script's, in quick mode or not, figures
    into ``out``, no window for matplotlib, never waiting at a prediction."""
    env = dict(os.environ, MPLBACKEND="Agg", TINYMEM_LESSON_OUT=str(out))
    env.pop("PREDICT", None)
    env.pop("TINYMEM_QUICK", None)
    if quick:
        env["TINYMEM_QUICK"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def execute_command(lesson, notebook, timeout_s=None):
    """The command that executes ``lesson`` into ``notebook`` and prints its transcript; its
    cells may run ``timeout_s`` seconds in all (default: execute's, 600)."""
    limit = ["--timeout", repr(float(timeout_s))] if timeout_s is not None else []
    return [sys.executable, "-m", "tinymem.course.execute", str(lesson), "--notebook", str(notebook), *limit]


def _run_one(lesson, notebooks, figures, quick, timeout_s):
    """Execute one lesson in a scratch folder: ``(lesson, seconds, None or the failure's text)``."""
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"tinymem-{lesson.stem}-") as scratch:
        command = execute_command(lesson, notebooks / f"{lesson.stem}.ipynb", timeout_s)
        process = subprocess.Popen(command, cwd=scratch, env=lesson_env(quick, figures / lesson.stem), text=True,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            # The cells' own limit names the cell that ran out; this one catches a kernel that hangs
            # starting or stopping.
            _, err = process.communicate(timeout=timeout_s + KERNEL_GRACE_S)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)  # the kernel notices its parent died and exits
            process.communicate()
            hung = f"lessons/{lesson.name} ran past {timeout_s + KERNEL_GRACE_S:g} s (its kernel hung)"
            return lesson, time.perf_counter() - started, hung
    failure = None
    if process.returncode != 0:
        failure = err.strip().splitlines()[-1] if err.strip() else f"exit code {process.returncode}"
        failure = next((line for line in reversed(err.splitlines()) if line.startswith("lessons/")), failure)
    return lesson, time.perf_counter() - started, failure


def write_exercise_notebooks(folder):
    """The exercises notebook of each lesson that has exercises, ``folder/exercises_NN.ipynb``
    (:mod:`tinymem.course.grade_notebook`; not executed: a student runs it on their own file)."""
    from .execute import write
    from .grade_notebook import exercise_lessons, exercises_notebook

    return [write(exercises_notebook(n), pathlib.Path(folder) / f"exercises_{n}.ipynb") for n in exercise_lessons()]


def build(out, quick=False, only=None, jobs=None, timeout_s=None, source_url=None, notebooks=None):
    """Execute the lessons (unless ``notebooks`` names a folder of executed ones), then render
    the site into ``out/site``; returns the lesson pages. Raises ``RuntimeError`` naming every
    lesson that failed, and writes no page then."""
    from . import site

    out = pathlib.Path(out).resolve()  # each lesson runs in a scratch folder: a relative path would land there
    if notebooks is None:
        chosen = lessons(only)
        notebooks = out / "notebooks"
        if not only:  # a full build leaves no notebook of a lesson that no longer exists
            shutil.rmtree(notebooks, ignore_errors=True)
        notebooks.mkdir(parents=True, exist_ok=True)
        limit = timeout_s or (QUICK_TIMEOUT_S if quick else FULL_TIMEOUT_S)
        width = jobs or os.cpu_count() or 1
        failures = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=width) as pool:
            runs = [pool.submit(_run_one, lesson, notebooks, out / "figures", quick, limit) for lesson in chosen]
            for run in concurrent.futures.as_completed(runs):
                lesson, seconds, failure = run.result()
                print(f"{lesson.name}: {'FAILED' if failure else 'ran'} in {seconds:.0f} s", flush=True)
                if failure:
                    failures.append(failure)
        if failures:
            raise RuntimeError(f"{len(failures)} lesson(s) failed, no site written:\n  "
                               + "\n  ".join(sorted(failures)))
        write_exercise_notebooks(notebooks)
    return site.render(notebooks, out / "site", source_url=source_url)


def _out_refusal(out):
    """Why ``--out`` may not be written, or None: the build replaces ``out/site`` and
    ``out/notebooks``, so it never goes into the checkout (but under course_site/, git-ignored),
    over a site or notebooks of someone else's, nor into a folder that is not one."""
    out = out.resolve()
    if out in (ROOT, *ROOT.parents) or (out.is_relative_to(ROOT) and not out.is_relative_to(ROOT / "course_site")):
        return (f"--out {out} would write into the course's own files: choose a folder outside {ROOT} "
                "(or under its course_site/)")
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file, not a folder: choose a folder"
    site, notebooks = out / "site", out / "notebooks"
    if (site.exists() and not (site / ".buildinfo").is_file()) or (  # Sphinx writes .buildinfo
            notebooks.is_dir() and any(p.suffix not in (".ipynb", ".tmp") for p in notebooks.iterdir())):
        return (f"--out {out} holds a site/ or notebooks/ folder this command did not write, which the build "
                "would replace: choose another folder")
    existing = next(p for p in (out, *out.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"--out {out}: {existing} is not writable: choose a folder you can write"
    return None


def _refusal(args):
    """What is wrong with the arguments, or None: checked before anything runs or is written."""
    if args.jobs is not None and args.jobs < 1:
        return f"--jobs {args.jobs} must be 1 or more"
    if args.timeout is not None and not 0 < args.timeout < math.inf:  # NaN fails both
        return f"--timeout {args.timeout:g} must be a positive, finite number of seconds"
    bad = [n for n in args.only or [] if not re.fullmatch(r"\d{1,2}", n)]
    if bad:
        return f"--only {' '.join(map(repr, bad))}: give lesson numbers, e.g. --only 01 06"
    if args.source_url is not None and urllib.parse.urlsplit(args.source_url).scheme not in ("http", "https"):
        return f"--source-url {args.source_url!r} must be an http:// or https:// address"
    from ..cli_help import default_out

    out_refused = _out_refusal(pathlib.Path(args.out or default_out("course_site", args.quick)))
    if out_refused:
        return out_refused
    if args.notebooks is not None and not pathlib.Path(args.notebooks).is_dir():
        return f"--notebooks {args.notebooks} is not a folder of executed notebooks"
    try:
        lessons(args.only)
    except ValueError as exc:
        return str(exc)
    from . import missing_packages

    missing = missing_packages()
    if missing:
        return (f"the course's packages are not installed ({', '.join(missing)}): "
                "pip install -e '.[course]' (the test extra includes them)")
    return None


def command(args):
    """``tinymem course build``'s arguments -> exit code."""
    from ..cli_help import default_out

    refusal = _refusal(args)
    if refusal:
        print(f"tinymem course build: {refusal}", file=sys.stderr)
        return 2
    from .site import SiteError

    out = args.out or default_out("course_site", args.quick)
    try:
        pages = build(out, args.quick, args.only, args.jobs, args.timeout, args.source_url, args.notebooks)
    except (RuntimeError, SiteError) as exc:
        print(f"tinymem course build: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {len(pages)} lesson pages: open {pathlib.Path(out) / 'site' / 'index.html'}; "
          f"the notebooks are in {pathlib.Path(args.notebooks or pathlib.Path(out) / 'notebooks')}")
    return 0


def add_parser(sub):
    """``build`` under ``tinymem course``."""
    build_ = sub.add_parser("build", help="execute every lesson as a notebook and render the course site")
    build_.add_argument("--quick", action="store_true", help="small sizes (TINYMEM_QUICK=1), as CI builds it")
    build_.add_argument("--out", help="output folder (default course_site/, or course_site/quick/ with --quick)")
    build_.add_argument("--only", nargs="+", metavar="NN", help="only these lessons, by number (e.g. 01 06)")
    build_.add_argument("--jobs", type=int, help="lessons run at once (default: one per CPU core)")
    build_.add_argument("--timeout", type=float, help=f"seconds one lesson may run (default {QUICK_TIMEOUT_S} "
                        f"with --quick, {FULL_TIMEOUT_S} without)")
    build_.add_argument("--source-url", help="link source files to URL/PATH (e.g. https://github.com/OWNER/"
                        "tinymem/blob/main/) instead of pages of the site")
    build_.add_argument("--notebooks", help="render the executed NN_*.ipynb of this folder, running nothing")
    build_.set_defaults(fn=command)
