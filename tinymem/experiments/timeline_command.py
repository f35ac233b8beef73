"""``tinymem timeline``: one training step, or a whole script, as a timeline page and a snapshot.

    tinymem timeline --workload transformer --sizes 64,32,32,2,2 --batch 8 --out step.html
    tinymem timeline --out run.html -- python train.py --epochs 1

The workload form builds the model and its Adam optimizer, then runs one step (forward,
backward, update) inside a ``memory.track()`` window; the script form runs ``train.py`` in this
process (``runpy``, with its own ``sys.argv``) inside the window, so every array tinymem makes
is on the page. Then it writes the page (``Tracker.export_page``) and, with ``--snapshot``,
PyTorch's memory snapshot (``Tracker.export_snapshot``). Everything is checked before the step
runs, and a step that raises writes nothing: no half-written page is left behind.
"""
import os
import runpy
import sys

from .. import memory, optim
from ..planner.workloads import WORKLOADS, workload

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


def script_window(command):
    """Run ``command`` (``[python] script.py args...``) in this process inside a window."""
    if command and os.path.basename(command[0]).startswith("python"):
        command = command[1:]
    if not command or not command[0].endswith(".py"):
        raise ValueError("give a Python script after --, e.g. tinymem timeline -- python train.py")
    if not os.path.isfile(command[0]):
        raise FileNotFoundError(f"no script {command[0]!r}")
    argv = sys.argv
    sys.argv = list(command)
    try:
        with memory.track(measure=False) as t:
            runpy.run_path(command[0], run_name="__main__")
    finally:
        sys.argv = argv
    return t


def run(args):
    """The command: returns the exit status (2 for a bad argument, 1 when the step raised)."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if command and args.workload:
        return _refuse("give either --workload NAME or a script after --, not both")
    for path in [args.out] + ([args.snapshot] if args.snapshot else []):
        folder = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(folder):
            return _refuse(f"cannot write {path}: the folder {folder} does not exist; create it first")
        if not os.access(folder, os.W_OK):
            return _refuse(f"cannot write {path}: the folder {folder} is not writable")
    if command:
        title = " ".join(command)
        step = lambda: script_window(command)  # noqa: E731
    else:
        name = args.workload or "transformer"
        if name not in WORKLOADS:
            return _refuse(f"unknown workload {name!r}; choose one of {', '.join(WORKLOADS)}")
        sizes = args.sizes or DEFAULT_SIZES[name]
        if args.batch < 1:
            return _refuse(f"--batch must be >= 1, got {args.batch}")
        title = f"one Adam step of {name}({sizes}), batch {args.batch}"
        step = lambda: workload_step(name, sizes, args.batch, args.device)  # noqa: E731
    try:
        tracker = step()
    except ValueError as exc:  # a bad size or script name, said before anything ran
        return _refuse(str(exc))
    except Exception as exc:  # noqa: BLE001 - whatever the step raised, the page is not written
        print(f"tinymem timeline: the step raised {type(exc).__name__}: {exc}\nno page written",
              file=sys.stderr)
        return 1
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
