"""Timing in turns: every function gets one sample per turn, in order, and the spread statistics
are the ones NumPy's percentiles give."""
import numpy as np
import pytest

from tinymem.measure.timing import interleaved_samples, interleaved_times, paired_turns, spread


def test_samples_are_taken_in_turns():
    calls = []
    fake = iter(range(100))
    samples = interleaved_samples({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                  repeats=3, warmup=1, clock=lambda: next(fake))
    assert calls == ["a", "b"] + ["a", "b"] * 3
    assert samples == {"a": [1, 1, 1], "b": [1, 1, 1]}  # each turn reads the clock twice
    assert interleaved_times({"a": lambda: None}, repeats=2, clock=iter(range(0, 100, 5)).__next__) == {"a": 5}


def test_spread():
    s = spread([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["median"], s["q1"], s["q3"], s["iqr"], s["best"], s["n"]) == (3.0, 2.0, 4.0, 2.0, 1.0, 5)
    with pytest.raises(ValueError, match="at least one"):
        spread([])
    with pytest.raises(ValueError, match="repeats"):
        interleaved_samples({"a": lambda: None}, repeats=0)


def test_paired_turns_counts_turns_and_takes_lower_quartiles():
    t = paired_turns([2.0, 3.0, 1.0, 5.0, 4.0], [1.0, 4.0, 0.5, 2.0, 2.0])
    # slower in turns 0, 2, 3, 4; lower quartiles 2.0 and 1.0
    assert t == {"turns": 5, "slower": 4, "share": 0.8, "q1_ratio": 2.0}
    with pytest.raises(ValueError, match="same turns"):
        paired_turns([1.0, 2.0, 3.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="at least two turns"):
        paired_turns([], [])


@pytest.mark.parametrize("slow, fast, named, what", [
    ([2.0], [1.0], "slow", "at least two turns"),
    ([2.0, 3.0], [1.0, 1.0, 1.0], "same turns", "same turns"),
    ([2.0, float("nan"), 3.0], [1.0, 1.0, 1.0], "slow", "finite"),
    ([2.0, 3.0, 4.0], [1.0, float("inf"), 1.0], "fast", "finite"),
    ([-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0], "slow", ">= 0"),
    (["2", "3"], ["1", "1"], "slow", "numbers"),
    ([True, True], [False, False], "slow", "numbers"),
    (None, [1.0, 1.0], "slow", "numbers"),
    ([[2.0, 3.0]], [[1.0, 1.0]], "slow", "flat list"),
])
def test_paired_turns_refuses_what_is_not_two_lists_of_timings_by_name(slow, fast, named, what):
    """Before, one turn gave a verdict (1/1 slower), a NaN or inf turn gave q1_ratio nan, negative
    times and the strings "2", "3" were compared as timings, and booleans raised numpy's TypeError."""
    with pytest.raises(ValueError, match=what) as err:
        paired_turns(slow, fast)
    assert named in str(err.value)


def test_paired_turns_takes_a_lower_quartile_of_zero_as_beaten_by_any_time():
    """A wait prefetch hid entirely takes 0 s; before, its lower quartile raised ZeroDivisionError."""
    assert paired_turns([0.2, 0.3, 0.25], [0.0, 0.0, 0.0])["q1_ratio"] == float("inf")
    assert paired_turns([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]) == {"turns": 3, "slower": 0, "share": 0.0, "q1_ratio": 1.0}
