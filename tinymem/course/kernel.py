"""What a lesson shows when it runs in a notebook kernel (Jupyter, VS Code, Colab, or the course
build's executor) rather than as a script: the question of a prediction set apart, its measured
answer folded until the reader clicks it, and each figure the cell wrote, inline.

``lessons/course.py`` calls these only when :func:`active` is true; as a script a lesson prints
plain text, as before. Every block is displayed with an HTML form and a ``text/plain`` form that
is exactly what the script prints, so a transcript of a notebook's outputs reads like the
script's standard output (the lesson tests read it). Nothing here holds memory beyond the list of
figure files already seen, one entry per PNG under the lesson's output folder.
"""
import html
import os
import pathlib
import sys

PREDICT_STYLE = ("border-left: 4px solid #c77c02; background: #fff6e0; padding: 0.4em 0.8em; "
                 "margin: 0.6em 0; white-space: pre-wrap")
ANSWER_STYLE = ("border-left: 4px solid #2e7d32; background: #eef7ee; padding: 0.4em 0.8em; "
                "margin: 0.6em 0; white-space: pre-wrap")


def _shell():
    """The running IPython kernel's shell, or None (a script, or a terminal IPython). IPython is
    looked up in ``sys.modules`` only: a script never pays for importing it."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    return shell if getattr(shell, "kernel", None) is not None else None


def active():
    """True inside a notebook kernel, where outputs are displayed rather than printed."""
    return _shell() is not None


def _display(plain, markup):
    from IPython.display import display
    display({"text/plain": plain, "text/html": markup}, raw=True)


def show_prediction(question):
    """The question, set apart, with its ``PREDICT:`` text form (a blank line, then the question)."""
    _display(f"\nPREDICT: {question}",
             f'<div class="tinymem-predict" style="{PREDICT_STYLE}"><strong>PREDICT:</strong> '
             f"{html.escape(question)}</div>")


def show_answer(answer, checked):
    """The measured answer and the claim checked on it, inside a ``<details>`` that stays folded
    until clicked, so the reader predicts before looking. ``checked`` is None when the claim
    failed (the caller raises next): the answer is still shown."""
    plain = f"MEASURED: {answer}" + (f"\n  checked on this run: {checked}" if checked is not None else "")
    claim = (f'<div class="tinymem-checked">checked on this run: {html.escape(checked)}</div>'
             if checked is not None else "")
    _display(plain, f'<details class="tinymem-measured" style="{ANSWER_STYLE}">'
                    "<summary><strong>MEASURED</strong> (your prediction first, then click)</summary>"
                    f'<div class="tinymem-answer">{html.escape(answer)}</div>{claim}</details>')


def _figures(folder):
    """``{path: modification time}`` of every PNG under ``folder`` (none if it does not exist)."""
    root = pathlib.Path(folder)
    return {p: p.stat().st_mtime_ns for p in root.rglob("*.png")} if root.is_dir() else {}


def watch_figures(folder):
    """After each cell, display the PNGs it wrote or rewrote under ``folder``, oldest first, so a
    figure appears under the cell that drew it. Registered once per kernel and folder; the PNGs
    already there when this is called are not shown again."""
    shell = _shell()
    if shell is None:
        return
    watched = getattr(shell, "_tinymem_watched", set())
    if folder in watched:
        return
    shell._tinymem_watched = watched | {folder}
    seen = _figures(folder)

    def show_new(result=None):
        from IPython.display import Image, display
        now = _figures(folder)
        for path in sorted((p for p, t in now.items() if seen.get(p) != t), key=now.get):
            display(Image(filename=str(path)), metadata={"tinymem_figure": os.fspath(path.name)})
        seen.clear()
        seen.update(now)

    shell.events.register("post_run_cell", show_new)


def plain_warnings():
    """Show a warning a cell raises as ``Category: message``. In a kernel, Python names the
    cell's code after IPython's temporary file (``/tmp/ipykernel_PID/HASH.py:3``), which means
    nothing to a reader and is gone once the kernel stops; a warning from a module keeps its
    ``file:line``. Installed once per kernel."""
    import warnings

    if _shell() is None or getattr(warnings.formatwarning, "tinymem_plain", False):
        return
    shown = warnings.formatwarning

    def plain(message, category, filename, lineno, line=None):
        if pathlib.Path(filename).parent.name.startswith("ipykernel_"):  # a cell's code
            return f"{category.__name__}: {message}\n"
        return shown(message, category, filename, lineno, line)

    plain.tinymem_plain = True
    warnings.formatwarning = plain
