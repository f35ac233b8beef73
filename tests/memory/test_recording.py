"""A Recording (rows made outside the ledger) is drawn by the timeline page and the snapshot export
exactly as its rows say; rows that do not add up are refused."""
import pickle

import pytest

from tinymem.memory import page
from tinymem.memory.recording import Recording

ENTERED = [(100, "held", "op0", "before")]
EVENTS = [(0.1, 50, "made", "op1", "x"), (0.2, 30, "made", "op2", "y"),  # 180: the peak
          (0.3, -50, "made", "op1", "x"), (0.4, -100, "held", "op0", "before"), (0.5, 40, "made", "op1", "x")]


def _recording():
    return Recording(("held", "made"), ENTERED, EVENTS, marks=[(0.15, "second phase")])


def test_the_page_draws_the_rows_buckets_peak_and_marks():
    r = _recording()
    assert r.peak() == 180 and r.peak_by_bucket() == {"held": 100, "made": 80}
    numbers = page.data(r, "rows")
    assert numbers["buckets"] == ["held", "made"] and numbers["entered"] == 100
    assert numbers["peak"]["bytes"] == 180 and numbers["peak"]["x"] == 1
    assert numbers["marks"] == [[1, "second phase"]]
    assert [s[1:] for s in numbers["drawn"]] == [[100, 50], [100, 80], [100, 30], [0, 30], [0, 70]]
    # [bucket, bytes, first event, last event, ...]: the entered array lives from before the rows to the 4th
    assert [a[:4] for a in numbers["arrays"]] == [[0, 100, -1, 3], [1, 50, 0, 2], [1, 30, 1, -1], [1, 40, 4, -1]]


def test_the_snapshot_holds_the_rows_bytes_at_the_peak_and_at_the_end(tmp_path):
    r = _recording()
    for at, live in (("peak", 180), ("end", 70)):
        path = tmp_path / f"{at}.pickle"
        r.export_snapshot(path, at=at)
        with open(path, "rb") as f:
            snap = pickle.load(f)
        assert snap["segments"][0]["allocated_size"] == live
        actions = [e["action"] for e in snap["device_traces"][0]]
        assert actions.count("alloc") == (2 if at == "peak" else 3)


@pytest.mark.parametrize("entered, events, match", [
    ([(1, "nowhere", "op", "d")], [], "entered names bucket 'nowhere'"),
    ([], [(0.0, 5, "made", "op", "d"), (0.1, -6, "made", "op", "d")], "frees 6 B of made"),
    ([], [(0.0, 2.5, "made", "op", "d")], "bytes 2.5"),
    ([(True, "held", "op", "d")], [], "bytes True"),  # a bool is not a size
    ([], [(float("nan"), 5, "made", "op", "d")], "time nan"),  # unsortable: the rows' order would be lost
    ([], [(0.0, 5, "made")], r"event \(0.0, 5, 'made'\) is not .time s, \+-bytes, bucket, op, description."),
])
def test_rows_that_do_not_add_up_are_refused(entered, events, match):
    with pytest.raises(ValueError, match=match):
        Recording(("held", "made"), entered, events)
