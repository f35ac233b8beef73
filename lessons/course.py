"""What every lesson shares: quick mode, the folder its figures go to, their footer, and the
predict-then-reveal moments (displayed set apart, the answer folded, in a notebook kernel).

    TINYMEM_QUICK=1          small sizes (how CI runs every lesson)
    TINYMEM_LESSON_OUT=DIR   where a lesson writes its PNGs (default: lessons/out/, git-ignored)
    PREDICT=1                stop at each prediction until you press Enter (unset or 0: print
                             the question and go on, which is how CI runs; with no input to
                             read, a note says so and the lesson goes on)
"""
import os
import pathlib
import sys

import numpy as np

from tinymem import backend
from tinymem.autograd.tensor import Tensor
from tinymem.course import kernel
from tinymem.measure.records import meta

HERE = pathlib.Path(__file__).resolve().parent
QUICK = os.environ.get("TINYMEM_QUICK") == "1"
OUT = os.environ.get("TINYMEM_LESSON_OUT") or str(HERE / "out")
# The committed figures and their records (figures/data/NAME.json), made by `tinymem figures`.
FIGURES = HERE.parent / "figures"
# Machine (the default device's: TINYMEM_DEVICE), versions and date, printed under each figure a lesson draws.
RECORDS = {"meta": meta(backend.default_device(), QUICK)}
# In a notebook kernel each figure a cell writes into OUT is shown under that cell, and a
# warning a cell raises is shown without the kernel's temporary file name.
kernel.watch_figures(OUT)
kernel.plain_warnings()


def _predict_switch():
    value = os.environ.get("PREDICT", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"PREDICT={value!r} is not understood: set PREDICT=1 to stop at each prediction, "
                         "or leave it unset (or 0) to run straight through")
    return value == "1"


PREDICT = _predict_switch()


def predict(question):
    """Ask the reader to predict before the lesson measures. With ``PREDICT=1`` the lesson waits
    here for Enter (in a notebook, run the cells one at a time instead); when there is nothing
    to read (standard input closed, as under a pipe or a scheduler), it says so and goes on.
    In a notebook kernel the question is displayed set apart, and never waits."""
    if kernel.active():
        kernel.show_prediction(question)
        return
    print(f"\nPREDICT: {question}")
    if PREDICT:
        try:
            if sys.stdin is None:  # started with its standard input closed (<&-): input() would raise RuntimeError
                raise EOFError
            input("  write your prediction down, then press Enter for the measurement ")
        except EOFError:
            print("\n  (PREDICT=1, but standard input is closed: going on without waiting; "
                  "run the lesson in a terminal to stop here)")


def _truth(claim, holds):
    """``holds`` as a Python bool. Only a bool, a NumPy bool or a 0-d boolean array (NumPy or
    CuPy, or a Tensor of one) is a claim's value: anything else, truthy or not, would let stale
    prose pass."""
    if isinstance(holds, Tensor):  # a comparison of Tensors gives a Tensor
        holds = holds.data
    if isinstance(holds, (bool, np.bool_)):
        return bool(holds)
    if np.ma.is_masked(holds):
        hint = "a masked value (neither true nor false): fill it, e.g. value.filled(False)"
    elif getattr(holds, "shape", None) == () and getattr(holds, "dtype", None) == np.bool_:
        return bool(backend.to_numpy(holds))
    elif callable(holds):
        hint = "a function, not its value: call it"
    elif isinstance(holds, (tuple, list)):
        hint = f"a {type(holds).__name__} of {len(holds)}: combine its items with all(...) or any(...)"
    elif isinstance(holds, str):
        hint = "a string: compare it with what the claim expects instead"
    elif isinstance(holds, (int, float, np.number)):
        hint = f"the number {holds!r}: compare it, e.g. value < limit"
    elif getattr(holds, "shape", None) == ():
        hint = f"a single {getattr(holds, 'dtype', '')} value: compare it, e.g. value < limit"
    elif hasattr(holds, "shape"):
        hint = f"an array of shape {tuple(holds.shape)}: reduce it with (...).all() or (...).any()"
    else:
        hint = f"a {type(holds).__name__}"
    raise TypeError(f"the lesson checks {claim!r} with {hint}; a claim's value must be True or False "
                    "(a bool or a NumPy bool)")


def _contradicted(claim):
    return AssertionError(f"the lesson says {claim!r}, and this run contradicts it")


def check(claim, holds):
    """A sentence of the lesson, checked on this run: ``holds`` is its predicate's value, True
    or False (a bool or NumPy bool; anything else is refused with a TypeError). A sentence the
    run contradicts stops the lesson (so CI catches prose that went stale)."""
    if not _truth(claim, holds):
        raise _contradicted(claim)
    print(f"  checked on this run: {claim}")


def reveal(answer, claim, holds):
    """The measured answer to the last prediction, then the lesson's claim about it, checked. In
    a notebook kernel both are displayed folded, so that the reader predicts before looking."""
    if not kernel.active():
        print(f"MEASURED: {answer}")
        check(claim, holds)
        return
    holds = _truth(claim, holds)
    kernel.show_answer(answer, claim if holds else None)
    if not holds:
        raise _contradicted(claim)
