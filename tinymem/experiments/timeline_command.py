"""``tinymem timeline``: one training step, or a whole script, as a timeline page and a snapshot.

    tinymem timeline --workload transformer --sizes 64,32,32,2,2 --batch 8 --out step.html
    tinymem timeline --out run.html -- python train.py --epochs 1

The workload form builds the model and its Adam optimizer, then runs one step (forward,
backward, update) inside a ``memory.track()`` window; the script form runs ``train.py`` in this
process (``runpy``, with its own ``sys.argv``) inside the window, so every array tinymem makes
is on the page. Then it writes the page (``Tracker.export_page``) and, with ``--snapshot``,
PyTorch's memory snapshot (``Tracker.export_snapshot``). Everything is checked before the step
runs, and a step that raises writes nothing: no half-written page is left behind. A script
that ends with ``sys.exit(0)`` has completed (its page is written); ``sys.exit(3)`` is a failure,
and the command exits with the script's status.
"""
import os
import runpy
import sys

from .. import backend, memory, optim
from ..planner.measured.workloads import WORKLOADS, workload

DEFAULT_SIZES = {"mlp": "64,1024,1024,10", "unet": "1,4,8,3,32", "transformer": "64,32,32,2,2"}


def workload_step(name, sizes, batch, device="cpu"):
    """One Adam step of a planner workload inside a closed window: the Tracker."""
    work = workload(name, sizes, device)
    model = work.build("none")
    opt = optim.Adam(model.parameters(), lr=1e-3)
    data = work.batch(batch)
    with memory.track(measure=False, device=device) as t:
        memory.mark("forward")
        loss = work.loss(model, data)
        loss.backward()  # marks "backward" itself
        opt.step()  # and "optimizer"
        del loss
    return t


def script_path(command):
    """The script of ``command`` (``[python] script.py args...``), checked before anything runs;
    ``(script, argv)``."""
    if command and os.path.basename(command[0]).startswith("python"):
        command = command[1:]
    if not command or not command[0].endswith(".py"):
        raise ValueError("give a Python script after --, e.g. tinymem timeline -- python train.py")
    if not os.path.isfile(command[0]):
        raise ValueError(f"no script {command[0]!r}")
    return command[0], list(command)


def script_window(command):
    """Run ``command`` (``[python] script.py args...``) in this process inside a window, with its
    ``sys.argv`` and its folder first on ``sys.path``, as ``python`` runs it. A script
    that ends with ``sys.exit(0)`` (or ``sys.exit()``) has completed, as it would under
    ``python``; any other exit status is raised as the step's failure."""
    script, args = script_path(command)
    argv, path = sys.argv, list(sys.path)
    sys.argv = args
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # as `python script.py`: its folder imports
    try:
        with memory.track(measure=False) as t:
            try:
                runpy.run_path(script, run_name="__main__")
            except SystemExit as exc:
                if exc.code not in (None, 0):
                    raise ScriptExit(exc.code) from None
    finally:
        sys.argv, sys.path[:] = argv, path
    return t


class ScriptExit(Exception):
    """The script called ``sys.exit`` with a failure status (kept in ``code``)."""

    def __init__(self, code):
        super().__init__(f"the script exited with status {code!r}")
        self.code = code if isinstance(code, int) else 1


def run(args):
    """The command: returns the exit status (2 for a bad argument, 1 when the step raised, the
    script's own status when it called ``sys.exit`` with a failure)."""
    given_command = args.command[:1] == ["--"]
    command = args.command[1:] if given_command else args.command
    if given_command and not command:
        return _refuse("nothing after --: give a Python script, e.g. tinymem timeline -- python train.py, "
                       "or leave out -- to run one step of --workload")
    if command and args.workload:
        return _refuse("give either --workload NAME or a script after --, not both")
    for path in [args.out] + ([args.snapshot] if args.snapshot else []):
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            return _refuse(f"cannot write {path}: the folder {folder} does not exist; create it first")
        if os.path.isdir(path):
            return _refuse(f"cannot write {path}: it is a folder; give a file name inside it")
        if not os.access(folder, os.W_OK):
            return _refuse(f"cannot write {path}: the folder {folder} is not writable")
    if args.snapshot and os.path.abspath(args.snapshot) == os.path.abspath(args.out):
        return _refuse(f"--out and --snapshot are the same file ({args.out}); give them two names")
    try:  # everything said before the step runs: a ValueError from the step itself is its failure
        if command:
            script_path(command)
            title = " ".join(command)
            step = lambda: script_window(command)  # noqa: E731
        else:
            name = args.workload or "transformer"
            if name not in WORKLOADS:
                return _refuse(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
            sizes = args.sizes or DEFAULT_SIZES[name]
            if args.batch < 1:
                return _refuse(f"--batch must be >= 1, got {args.batch}")
            workload(name, sizes, args.device)
            title = f"one Adam step of {name}({sizes}), batch {args.batch}"
            step = lambda: workload_step(name, sizes, args.batch, args.device)  # noqa: E731
    except (ValueError, TypeError, backend.DeviceError) as exc:
        return _refuse(str(exc))
    try:
        tracker = step()
    except Exception as exc:  # noqa: BLE001 - whatever the step raised, the page is not written
        print(f"tinymem timeline: the step raised {type(exc).__name__}: {exc}\nno page written",
              file=sys.stderr)
        return exc.code if isinstance(exc, ScriptExit) else 1
    try:
        tracker.export_page(args.out, title)
        if args.snapshot:
            tracker.export_snapshot(args.snapshot)
    except (OSError, ValueError) as exc:
        return _refuse(str(exc))
    print(f"peak {tracker.peak():,d} B; wrote {args.out}" + (f" and {args.snapshot}" if args.snapshot else ""))
    print(f"open {args.out} in a browser" + (f"; drag {args.snapshot} into https://pytorch.org/memory_viz"
                                             if args.snapshot else ""))
    return 0


def _refuse(message):
    print(f"tinymem timeline: {message}", file=sys.stderr)
    return 2
