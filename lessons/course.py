"""What every lesson shares: quick mode, the folder its figures go to, and their footer.

    TINYMEM_QUICK=1          small sizes (how CI runs every lesson)
    TINYMEM_LESSON_OUT=DIR   where a lesson writes its PNGs (default: lessons/out/, git-ignored)
    PREDICT=1                stop at each "PREDICT:" question until you have answered it
"""
import os
import pathlib
import sys

from tinymem.measure.records import meta

HERE = pathlib.Path(__file__).resolve().parent
QUICK = os.environ.get("TINYMEM_QUICK") == "1"
OUT = os.environ.get("TINYMEM_LESSON_OUT") or str(HERE / "out")
# The committed figures and their records (figures/data/NAME.json), made by `tinymem figures`.
FIGURES = HERE.parent / "figures"
# Machine, versions and date, printed under each figure a lesson draws.
RECORDS = {"meta": meta("cpu", QUICK)}


def peak_phase(tracker):
    """The label of the last ``memory.mark`` before the first moment ``tracker`` reached its peak."""
    phase = None
    for event in tracker.timeline():
        if event["kind"] == "mark":
            phase = event["label"]
        elif sum(event["live"].values()) == tracker.peak():
            return phase
    return phase


# Predict, then reveal. PREDICT=1 (in a terminal) waits for your answer before the lesson shows
# the measured one; without it (CI's quick run) the question is printed and the lesson goes on.
PREDICT = os.environ.get("PREDICT") == "1"


def predict(question):
    """Print ``question`` before its answer is computed; with PREDICT=1, wait for the reader's guess."""
    print(f"\nPREDICT: {question}")
    if PREDICT and sys.stdin.isatty():
        input("your answer, then Enter > ")


def check(sentence, value, holds, sized=False):
    """Print a sentence of the lesson beside the number that decides it and whether this run bears
    it out; returns ``holds``. ``sized``: the number depends on the model's size, so a quick run
    says that its small sizes make it mean little, rather than hide it."""
    verdict = "holds" if holds else "DOES NOT HOLD in this run"
    small = " (quick mode: sizes too small for this number to mean much)" if QUICK and sized else ""
    print(f"[{verdict}] {sentence}: {value}{small}")
    return bool(holds)
