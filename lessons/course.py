"""What every lesson shares: quick mode, the folder its figures go to, their footer, and the
predict-then-reveal moments.

    TINYMEM_QUICK=1          small sizes (how CI runs every lesson)
    TINYMEM_LESSON_OUT=DIR   where a lesson writes its PNGs (default: lessons/out/, git-ignored)
    PREDICT=1                stop at each prediction until you press Enter (unset or 0: print
                             the question and go on, which is how CI runs)
"""
import os
import pathlib

from tinymem import backend
from tinymem.measure.records import meta

HERE = pathlib.Path(__file__).resolve().parent
QUICK = os.environ.get("TINYMEM_QUICK") == "1"
OUT = os.environ.get("TINYMEM_LESSON_OUT") or str(HERE / "out")
# The committed figures and their records (figures/data/NAME.json), made by `tinymem figures`.
FIGURES = HERE.parent / "figures"
# Machine (the default device's: TINYMEM_DEVICE), versions and date, printed under each figure a lesson draws.
RECORDS = {"meta": meta(backend.default_device(), QUICK)}


def _predict_switch():
    value = os.environ.get("PREDICT", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"PREDICT={value!r} is not understood: set PREDICT=1 to stop at each prediction, "
                         "or leave it unset (or 0) to run straight through")
    return value == "1"


PREDICT = _predict_switch()


def predict(question):
    """Ask the reader to predict before the lesson measures. With ``PREDICT=1`` the lesson waits
    here for Enter (in a notebook, run the cells one at a time instead)."""
    print(f"\nPREDICT: {question}")
    if PREDICT:
        input("  write your prediction down, then press Enter for the measurement ")


def check(claim, holds):
    """A sentence of the lesson, checked on this run: ``holds`` is its predicate's value. A
    sentence the run contradicts stops the lesson (so CI catches prose that went stale)."""
    if not holds:
        raise AssertionError(f"the lesson says {claim!r}, and this run contradicts it")
    print(f"  checked on this run: {claim}")


def reveal(answer, claim, holds):
    """The measured answer to the last prediction, then the lesson's claim about it, checked."""
    print(f"MEASURED: {answer}")
    check(claim, holds)
