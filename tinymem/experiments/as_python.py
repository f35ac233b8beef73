"""Running ``python script.py args...`` inside this process, as ``python`` itself would.

``tinymem timeline -- python train.py`` runs the script in this process (as runpy would) so
that a tracking window sees every array it makes. What a user sees must still be what ``python``
shows them:

- the script runs with its own ``sys.argv`` (``argv[0]`` as given), its folder (a symlink's
  target's) first on ``sys.path`` and its absolute path as ``__file__`` (Python 3.9+ does so
  for a script named on the command line);
- a script that raises prints its traceback (through ``sys.excepthook``, as ``python`` does),
  starting at the script's own frame: tinymem's frames are not shown;
- the exit status follows CPython's rules for ``SystemExit`` (``_Py_HandleSystemExit``): no
  code or ``None`` is 0; an int is cut to a C long (one beyond it is -1) and the shell sees its
  lowest byte (``sys.exit(256)`` is 0, ``sys.exit(-1)`` is 255); any other object (``0.0``, a
  message) is printed on stderr and the status is 1. An exception is status 1; a
  ``KeyboardInterrupt`` (Ctrl-C) 130, as a shell shows python killing itself with SIGINT.

After the script, ``sys.argv``, ``sys.path`` and the working folder are as they were (a script
may ``os.chdir``; one that removed the folder it started in leaves us where it went). Cost:
nothing beyond the script's own.
"""
import io
import os
import reprlib
import signal
import sys
import traceback
import types

_LONG = 2 ** 63  # a C long on Linux and macOS: CPython reads the exit code as one


def script_path(command):
    """The script of ``command`` (``[python] script.py args...``), checked before anything runs;
    ``(script, argv)``."""
    if command and os.path.basename(command[0]).startswith("python") and not command[0].endswith(".py"):
        command = command[1:]
        if command and command[0].startswith("-"):  # -u, -X dev, -m module: this runner takes none
            raise ValueError(f"python's own option {command[0]} is not supported here: give the script right "
                             "after python, e.g. tinymem timeline -- python train.py")
    if not command or not command[0].endswith(".py"):
        raise ValueError("give a Python script after --, e.g. tinymem timeline -- python train.py")
    if not os.path.isfile(command[0]):
        raise ValueError(f"no script {command[0]!r}")
    return command[0], list(command)


def input_files(command):
    """The files ``command`` reads that exist now: the script and every argument naming an existing
    file (``data.txt``, or the value of ``--data=data.txt``), as absolute paths."""
    script, argv = script_path(command)
    names = [script] + [part for arg in argv[1:] for part in ([arg] + arg.split("=", 1)[1:])]
    return [os.path.abspath(n) for n in names if os.path.isfile(n)]


def run(script, argv):
    """Run ``script`` with ``argv`` as ``python`` would (see the module's docstring). Exceptions,
    ``SystemExit`` included, pass on to the caller: :func:`exit_status` and :func:`report`
    turn them into what ``python`` would show."""
    saved_argv, saved_path, saved_folder = sys.argv, list(sys.path), os.getcwd()
    script = os.path.abspath(script)
    sys.argv = list(argv)  # argv[0] as given, as python leaves it (runpy.run_path would not)
    sys.path.insert(0, os.path.dirname(os.path.realpath(script)))  # as `python script.py`: its folder imports
    # (through a symlink, its target's folder, as python resolves it)
    try:
        _run_as_main(script)
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        try:
            os.chdir(saved_folder)
        except FileNotFoundError:  # the script removed it: stay where it left us, as python would
            pass


def _run_as_main(script):
    """Execute the file ``script`` (an absolute path) as the ``__main__`` module, as runpy's
    ``run_path`` does for a file, but leaving ``sys.argv[0]`` alone (run_path sets it to
    ``script``, where python keeps the name as given)."""
    with io.open_code(script) as f:
        code = compile(f.read(), script, "exec", dont_inherit=True)  # bytes: a coding cookie is honoured
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=script, __cached__=None, __loader__=None, __package__=None, __spec__=None)
    saved_main = sys.modules["__main__"]
    sys.modules["__main__"] = main  # pickle and multiprocessing find the script's classes there
    try:
        exec(code, main.__dict__)
    finally:
        sys.modules["__main__"] = saved_main


def exit_status(error):
    """The status ``python script.py`` exits with when the script ended with ``error`` (None: it
    ran to its end), by CPython's rules (see the module's docstring)."""
    if error is None:
        return 0
    if isinstance(error, KeyboardInterrupt):
        return 128 + signal.SIGINT
    if not isinstance(error, SystemExit):
        return 1
    code = error.code
    if code is None:
        return 0
    if isinstance(code, int):
        return (code if -_LONG <= code < _LONG else -1) & 0xFF
    return 1


def ending(error):
    """How a script or step ended, in words: ``"raised KeyError"``, ``"called sys.exit(256)"``."""
    if error is None:
        return "ran to its end"
    if isinstance(error, SystemExit):
        # reprlib: short, and a repr that raises is not the command's failure
        return "called sys.exit(" + ("" if error.code is None else reprlib.repr(error.code)) + ")"
    return f"raised {type(error).__name__}"


def report(error, script=None):
    """Print on stderr what ``python`` prints when ``script`` ends with ``error``: a traceback
    from the script's own frame on (every frame when ``script`` is None), the argument of
    ``sys.exit("message")``, or nothing. A ``sys.excepthook`` of the script's that raises is shown
    with the original exception, as python shows them."""
    if isinstance(error, SystemExit):
        if error.code is not None and not isinstance(error.code, int):
            try:
                text = str(error.code)
            except Exception:  # noqa: BLE001 - python then prints only the line's end, and exits 1
                text = ""
            print(text, file=sys.stderr)
        return
    tb = error.__traceback__
    if script is not None:
        script = os.path.abspath(script)
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
            tb = tb.tb_next
    # The hook prints the exception's own __traceback__ (CPython 3.11 ignores its tb argument), so
    # the exception is cut too. tb None (a SyntaxError of the script): no frames, as under python.
    try:
        sys.excepthook(type(error), error.with_traceback(tb), tb)
    except Exception as broken:  # noqa: BLE001 - a hook of the script's that raises: python shows both
        print("Error in sys.excepthook:", file=sys.stderr)
        traceback.print_exception(broken.with_traceback(broken.__traceback__.tb_next), file=sys.stderr)  # from the hook
        print("\nOriginal exception was:", file=sys.stderr)
        sys.__excepthook__(type(error), error, tb)
