"""The time a figure run has left: last times, scaled by this run's pace."""
import json

from tinymem.measure.progress import describe, last_seconds, seconds_left


def test_time_left_scales_the_last_times_by_this_runs_pace():
    assert seconds_left([100.0, 50.0], []) == 150.0
    assert seconds_left([100.0, 50.0], [(20.0, 10.0)]) == 300.0  # this run goes twice as slow
    assert seconds_left([100.0, None], [(10.0, 10.0)]) == 200.0  # an unknown family counts as the mean
    assert seconds_left([None], [(10.0, 10.0)]) is None
    assert seconds_left([100.0], [(5.0, None)]) == 100.0  # a family with no earlier time sets no pace


def test_last_seconds_reads_only_a_run_at_the_same_sizes(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "rl.json").write_text(json.dumps({"meta": {"quick": False, "seconds": 1783.4}}))
    assert last_seconds(tmp_path, "rl", quick=False) == 1783.4
    assert last_seconds(tmp_path, "rl", quick=True) is None
    assert last_seconds(tmp_path, "edge", quick=False) is None
    assert describe(3, 15, "rl", 1783.4, 2520.0) == "[3/15] rl (last run 1783 s); about 42.0 min left"
    assert describe(1, 2, "x", None, None) == "[1/2] x (no earlier run); time left unknown"


def test_a_records_file_of_another_shape_is_an_unknown_time_not_an_error(tmp_path):
    """``tinymem figures`` reads every family's last time before it runs the first: a file that
    is valid JSON of another shape raised there and stopped the whole sweep."""
    (tmp_path / "data").mkdir()
    for content in ([], None, 5, {"meta": 5}, {"meta": {"quick": True, "seconds": "x"}},
                    {"meta": {"quick": True, "seconds": -3}}, {"meta": {"quick": True, "seconds": True}},
                    {"meta": {"quick": True, "seconds": float("nan")}}):
        (tmp_path / "data" / "fam.json").write_text(json.dumps(content))
        assert last_seconds(str(tmp_path), "fam", True) is None, content
    (tmp_path / "data" / "fam.json").write_text(json.dumps({"meta": {"quick": True, "seconds": 2.5}}))
    assert last_seconds(str(tmp_path), "fam", True) == 2.5
