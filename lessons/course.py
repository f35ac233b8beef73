"""What every lesson shares: quick mode, the folder its figures go to, and their footer.

    TINYMEM_QUICK=1          small sizes (how CI runs every lesson)
    TINYMEM_LESSON_OUT=DIR   where a lesson writes its PNGs (default: lessons/out/, git-ignored)
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


def peak_phase(tracker):
    """The label of the last ``memory.mark`` before the first moment ``tracker`` reached its peak."""
    phase = None
    for event in tracker.timeline():
        if event["kind"] == "mark":
            phase = event["label"]
        elif sum(event["live"].values()) == tracker.peak():
            return phase
    return phase
