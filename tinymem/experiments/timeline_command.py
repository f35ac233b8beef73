"""``tinymem timeline``: one training step, or a whole script, as a timeline page and a snapshot.

    tinymem timeline --workload transformer --sizes 64,32,32,2,2 --batch 8 --out step.html
    tinymem timeline --out run.html -- python train.py --epochs 1

The workload form builds the model and its Adam optimizer, then runs one step (forward,
backward, update) inside a ``memory.track()`` window; the script form runs ``train.py`` in this
process (:mod:`.as_python`, as ``python`` would) inside the window, so every array tinymem makes
is on the page. Then it writes the page (``page.render``) and, with ``--snapshot``, PyTorch's
memory snapshot (``snapshot.build``), both or neither (``write_together``).

Everything is checked before the step runs, and a refused input changes nothing. The output
paths are made absolute first (a script may ``os.chdir``); none may be the script, a file
argument of it or the page's template, nor one another. A step that fails (raises, or exits
with a status other than 0) still has its page written: memory up to the failure is what one
wants to see. The command says so on stderr, shows what ``python`` would (the traceback, the
argument of ``sys.exit``) and exits with ``python``'s status; when that is 0 but no page could
be written (an empty window, a file the script wrote itself) the status is 2.
"""
import os
import sys

from .. import backend, memory, optim
from ..measure.files import write_together
from ..memory import page, snapshot
from ..planner.measured.workloads import WORKLOADS, workload
from . import as_python

DEFAULT_SIZES = {"mlp": "64,1024,1024,10", "unet": "1,4,8,3,32", "transformer": "64,32,32,2,2"}


def window(body, device=None):
    """Run ``body()`` inside a tracking window: ``(the closed window, the exception that ended
    body or None)``. The window closes either way, so memory up to a failure can be drawn; the
    exception (``SystemExit`` and a Ctrl-C's ``KeyboardInterrupt`` too) is returned, not raised.
    Memory: its traceback keeps the failing frames' arrays alive until the caller drops it, as in
    a process that is failing."""
    error = None
    with memory.track(measure=False, device=device) as t:
        try:
            body()
        except (Exception, SystemExit, KeyboardInterrupt) as exc:  # noqa: BLE001 - the step's failure
            error = exc
    return t, error


def workload_body(name, sizes, batch, device="cpu"):
    """One Adam step of a planner workload, built (model, optimizer, data) and ready to run."""
    work = workload(name, sizes, device)
    model = work.build("none")
    opt = optim.Adam(model.parameters(), lr=1e-3)
    data = work.batch(batch)

    def step():
        memory.mark("forward")
        loss = work.loss(model, data)
        loss.backward()  # marks "backward" itself
        opt.step()  # and "optimizer"

    return step


def workload_step(name, sizes, batch, device="cpu"):
    """One Adam step of a planner workload inside a closed window: the Tracker."""
    t, error = window(workload_body(name, sizes, batch, device), device)
    if error is not None:
        raise error
    return t


def output_paths(args, inputs):
    """The absolute paths of ``--out`` and ``--snapshot`` (None when not given), checked: each
    in a writable folder, not a folder, FIFO or device, not one of ``inputs`` (files the command reads),
    not the other. Raises ValueError saying what is wrong."""
    given = [("--out", args.out)] + ([("--snapshot", args.snapshot)] if args.snapshot is not None else [])
    for flag, path in given:
        if not path or path.endswith(("/", os.sep)):  # realpath("") is this folder; abspath drops the "/"
            raise ValueError(f"cannot write {path!r}: give a file name (e.g. 'out.html'), not an empty path "
                             "or a folder")
        try:
            os.stat(path)
        except FileNotFoundError:  # a new file (or a link to one)
            pass
        except OSError as exc:  # a loop of symbolic links
            raise ValueError(f"cannot write {path}: {exc.strerror}; give another file name") from None
        folder = os.path.dirname(os.path.realpath(path))  # a symlink is written through: its target's folder
        if not os.path.isdir(folder):
            raise ValueError(f"cannot write {path}: the folder {folder} does not exist; create it first")
        if os.path.isdir(path):
            raise ValueError(f"cannot write {path}: it is a folder; give a file name inside it")
        if os.path.exists(path) and not os.path.isfile(path):  # see measure.files: a rename would replace it
            raise ValueError(f"cannot write {path}: it is not a regular file (a FIFO, device or socket); "
                             "give a file name")
        if not os.access(folder, os.W_OK):
            raise ValueError(f"cannot write {path}: the folder {folder} is not writable")
        for source in inputs:
            if _same(path, source):
                raise ValueError(f"{flag} {path} is {source}, which this command reads: writing there would "
                                 f"replace it; give {flag} another file name")
    if args.snapshot and _same(args.out, args.snapshot):
        raise ValueError(f"--out and --snapshot are the same file ({args.out}); give them two names")
    return [os.path.abspath(path) for _, path in given] + [None] * (2 - len(given))


def _same(a, b):
    """Do paths ``a`` and ``b`` name one file (through symlinks and hard links)?"""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _identity(path):
    """What tells whether ``path`` was written: ``(inode, mtime, size)``, or None if absent."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def run(args):
    """The command: returns the exit status (2 for a bad argument; otherwise ``python``'s status
    for the script, 1 for a workload step that raised; see the module's docstring)."""
    given_command = args.command[:1] == ["--"]
    command = args.command[1:] if given_command else args.command
    if given_command and not command:
        return _refuse("nothing after --: give a Python script, e.g. tinymem timeline -- python train.py, "
                       "or leave out -- to run one step of --workload")
    if command and args.workload:
        return _refuse("give either --workload NAME or a script after --, not both")
    try:  # everything said before the step runs: a ValueError from the step itself is its failure
        if command:
            script, argv = as_python.script_path(command)
            inputs, title = as_python.input_files(command), " ".join(command)
        else:
            name = "transformer" if args.workload is None else args.workload  # "" is not a name
            if name not in WORKLOADS:
                return _refuse(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
            sizes = DEFAULT_SIZES[name] if args.sizes is None else args.sizes
            if args.batch < 1:
                return _refuse(f"--batch must be >= 1, got {args.batch}")
            # Built here: sizes no model can have (30 wide, 4 heads) are a refused argument.
            step, device = workload_body(name, sizes, args.batch, args.device), args.device
            script, inputs, title = None, [], f"one Adam step of {name}({sizes}), batch {args.batch}"
        out, snap = output_paths(args, inputs + [page.TEMPLATE])
    except (ValueError, TypeError, backend.DeviceError) as exc:
        return _refuse(str(exc))
    if command:
        step, device = (lambda: as_python.run(script, argv)), None
    before = {path: _identity(path) for path in (out, snap) if path}
    tracker, error = window(step, device)
    status = as_python.exit_status(error)
    if error is not None:
        as_python.report(error, script)
    written = _write(tracker, title, out, snap, before)
    if status or (error is not None and getattr(error, "code", None) not in (None, 0)):  # sys.exit(256) too
        print(f"tinymem timeline: {'the script' if command else 'the step'} {as_python.ending(error)}: exit status "
              f"{status}" + (", as under python" if command else "")
              + ("; its page shows memory up to then" if written and status else ""), file=sys.stderr)
    if not written:
        return status or 2
    names = f"{args.out}" + (f" and {args.snapshot}" if args.snapshot else "")
    print(f"peak {tracker.peak():,d} B; wrote {names}")
    print(f"open {args.out} in a browser" + (f"; drag {args.snapshot} into https://pytorch.org/memory_viz"
                                             if args.snapshot else ""))
    return status


def _write(tracker, title, out, snap, before):
    """Write the page at ``out`` and the snapshot at ``snap`` (if not None), both or neither;
    False (and why, on stderr) when they cannot be."""
    changed = [path for path in before if _identity(path) not in (before[path], None)]
    if changed:
        print(f"tinymem timeline: no page written: the script itself wrote {changed[0]} while it ran; "
              "not replacing it: give --out / --snapshot names the script does not write", file=sys.stderr)
        return False
    try:
        text = page.render(page.data(tracker, title)).encode("utf-8")
        files = [(out, lambda f: f.write(text), ".html")]
        if snap:
            shot = snapshot.build(tracker)
            files.append((snap, lambda f: snapshot.dump(shot, f), ".pickle"))
        write_together(files)
    except (OSError, ValueError) as exc:
        print(f"tinymem timeline: no page written: {exc}", file=sys.stderr)
        return False
    return True


def _refuse(message):
    print(f"tinymem timeline: {message}", file=sys.stderr)
    return 2
