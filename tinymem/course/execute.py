"""One lesson executed once, as a notebook: jupytext reads the percent script, nbclient runs its
cells in an IPython kernel, and the notebook is written with every output in it (text, the
folded predictions of ``lessons/course.py``, figures as base64 PNG), ready for Jupyter, VS Code
or Colab and for the course site (:mod:`tinymem.course.site`), which renders it without running
it again.

    python -m tinymem.course.execute lessons/01_gradient_checkpointing.py --notebook DIR/01.ipynb

The kernel gets this process's environment and working folder, as the script would
(``TINYMEM_QUICK``, ``TINYMEM_LESSON_OUT``, ``MPLBACKEND``). The command prints the lesson's
transcript as the script would print it: every stream and every display's text form, in order,
on standard output, and standard error's streams on standard error; so a test that read the
script's output reads this unchanged. A cell that raises (a failed ``check()`` raises too) ends
the run with exit code 1 and a message naming the lesson, the cell, its line in the script and
its first line; the notebook is still written, with the error in it, to look at.

Memory: the notebook with its outputs is held in this process (a lesson's figures are a few
hundred KiB each); the lesson itself runs in the kernel's process.
"""
import argparse
import os
import pathlib
import re
import sys
import tempfile
import time

from ..measure.files import write_atomically

ROOT = pathlib.Path(__file__).resolve().parents[2]
SETUP_TAG = "remove-cell"  # myst-nb leaves a cell with this tag off the page
# The notebook's first cell: the lesson imports `course` from the lessons/ folder of the checkout
# that tinymem is installed from (pip install -e .), wherever the notebook itself is opened.
SETUP = """# Setup: the lessons import `course` (quick mode, output folder, predictions) from lessons/.
import pathlib, sys
import tinymem
sys.path.insert(0, str(pathlib.Path(tinymem.__file__).resolve().parents[1] / "lessons"))"""
CELL_MARKER = re.compile(r"^# %%")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
RAISED_AT = re.compile(r"Cell In\[\d+\], line (\d+)")  # IPython's traceback: the cell's line that raised


class LessonFailed(Exception):
    """A cell raised (or the kernel died): the message names the lesson, the cell and its line."""


def read_lesson(path):
    """The percent script at ``path`` as an nbformat v4 notebook for the python3 kernel, with a
    setup cell first (hidden on the site) and each cell's line in the script in its metadata."""
    import jupytext
    import nbformat

    path = pathlib.Path(path)
    text = path.read_text()
    notebook = jupytext.reads(text, fmt="py:percent")
    starts = [i + 2 for i, line in enumerate(text.splitlines()) if CELL_MARKER.match(line)]  # after the marker
    for cell, line in zip(notebook.cells, starts if len(starts) == len(notebook.cells) else []):
        cell.metadata["tinymem_line"] = line
    setup = nbformat.v4.new_code_cell(SETUP, metadata={"tags": [SETUP_TAG]})
    notebook.cells.insert(0, setup)
    notebook.metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "language_info": {"name": "python"},
        "tinymem": {"lesson": path.name, "quick": os.environ.get("TINYMEM_QUICK") == "1"}}
    for cell in notebook.cells:  # nbformat >= 5.9 wants an id on every cell
        cell.setdefault("id", f"cell-{notebook.cells.index(cell)}")
    return notebook


def coalesce_streams(notebook):
    """Join each run of consecutive outputs to one stream into one output, as a script's output
    reads (the kernel sends a stream in pieces as it flushes)."""
    for cell in notebook.cells:
        merged = []
        for output in cell.get("outputs", []):
            last = merged[-1] if merged else None
            if (output.output_type == "stream" and last is not None and last.output_type == "stream"
                    and last.name == output.name):
                last.text += output.text
            else:
                merged.append(output)
        if "outputs" in cell:
            cell.outputs = merged
    return notebook


def where(lesson, notebook, index):
    """``lessons/NAME.py line L (notebook cell K, which begins `...`)`` for the cell at ``index``:
    the line of the script that raised when its traceback says, else the cell's first line."""
    cell = notebook.cells[index]
    first = next((line for line in cell.source.splitlines() if line.strip()), "(empty)")
    line = cell.metadata.get("tinymem_line")
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    raised = RAISED_AT.search(ANSI.sub("", "\n".join(errors[0].traceback))) if errors else None
    if line and raised:
        line += int(raised.group(1)) - 1
    return f"{lesson}{f' line {line}' if line else ''} (notebook cell {index}, which begins `{first.strip()[:80]}`)"


def transcript(notebook):
    """``(stdout, stderr)`` of the notebook's outputs in order, as the script would print them:
    streams as they are, each display's or result's text form on its own line (figures, which
    the script only writes to files, are left out), errors' tracebacks on standard error."""
    out, err = [], []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            kind = output.output_type
            if kind == "stream":
                (err if output.name == "stderr" else out).append(output.text)
            elif kind in ("display_data", "execute_result") and "image/png" not in output.data:
                out.append(output.data.get("text/plain", "") + "\n")
            elif kind == "error":
                err.append(ANSI.sub("", "\n".join(output.traceback)) + "\n")
    return "".join(out), "".join(err)


def _shown(path):
    """``path`` as a reader of the checkout names it (``lessons/NAME.py``), or as given."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _failed_cell(notebook):
    return next((i for i, cell in enumerate(notebook.cells)
                 if any(o.output_type == "error" for o in cell.get("outputs", []))), None)


def execute(lesson, timeout_s=600, kernel_log=None):
    """Run ``lesson`` (a percent script) top to bottom in a fresh kernel in the current folder;
    returns the executed notebook. Raises :class:`LessonFailed` when a cell raises, when the
    lesson runs past ``timeout_s`` (its cells together: each cell gets the time left) or when the
    kernel dies; the exception's ``notebook`` holds the outputs so far."""
    import nbclient
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    lesson = pathlib.Path(lesson)
    notebook = read_lesson(lesson)
    deadline = time.monotonic() + timeout_s
    # nbclient reads a time of 0 or less as no limit: the last cell gets at least a millisecond.
    client = nbclient.NotebookClient(notebook, timeout=timeout_s, kernel_name="python3",
                                     timeout_func=lambda cell: max(deadline - time.monotonic(), 1e-3),
                                     resources={"metadata": {"path": os.getcwd()}})
    running = {}  # the cell the kernel was last given: the one to name if time runs out or the kernel dies
    client.on_cell_execute = lambda cell, cell_index: running.update(index=cell_index)
    name, failure = _shown(lesson), None
    try:
        # The kernel's own standard error (its start-up notices) goes to a log, not into the lesson's.
        client.execute(stderr=kernel_log)
    except CellExecutionError as exc:
        index = _failed_cell(notebook)
        at = where(name, notebook, index) if index is not None else name
        failure = LessonFailed(f"{at} raised {exc.ename}: {exc.evalue}")
        failure.kernel_died = False
    except (CellTimeoutError, DeadKernelError) as exc:
        at = where(name, notebook, running["index"]) if running else name
        failure = LessonFailed(f"{at}: {type(exc).__name__}: {str(exc).strip().splitlines()[0]}")
        failure.kernel_died = isinstance(exc, DeadKernelError)
    coalesce_streams(notebook)
    if failure is not None:
        failure.notebook = notebook
        raise failure
    return notebook


def write(notebook, path):
    """Validate ``notebook`` against nbformat v4 and write it to ``path`` atomically."""
    import nbformat

    nbformat.validate(notebook)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, lambda f: f.write(nbformat.writes(notebook).encode("utf-8")), suffix=".ipynb")
    return path


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tinymem.course.execute", description=__doc__.split("\n\n")[0])
    parser.add_argument("lesson", help="a lesson's percent script, e.g. lessons/01_gradient_checkpointing.py")
    parser.add_argument("--notebook", required=True, help="where to write the executed .ipynb")
    parser.add_argument("--timeout", type=float, default=600, help="seconds the lesson may run (default 600)")
    args = parser.parse_args(argv)
    if not pathlib.Path(args.lesson).is_file():
        parser.error(f"lesson {args.lesson!r} is not a file: name a lessons/NN_*.py script")
    if args.timeout <= 0:
        parser.error(f"--timeout {args.timeout} must be a positive number of seconds")
    with tempfile.TemporaryFile("w+") as log:
        try:
            notebook, failure = execute(args.lesson, args.timeout, kernel_log=log), None
        except LessonFailed as exc:
            notebook, failure = exc.notebook, exc
        out, err = transcript(notebook)
        sys.stdout.write(out)
        sys.stderr.write(err)
        write(notebook, args.notebook)
        if failure is not None:
            log.seek(0)
            kernel = log.read().strip()
            if kernel and failure.kernel_died:  # why it died may be there; the failure stays the last line
                print(f"the kernel's own standard error:\n{kernel[-3000:]}", file=sys.stderr)
            print(f"\n{failure}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
