"""Timing in turns: every function gets one sample per turn, in order, and the spread statistics
are the ones NumPy's percentiles give."""
import numpy as np
import pytest

from tinymem.measure.timing import effect_over_spread, interleaved_samples, interleaved_times, spread


def test_samples_are_taken_in_turns():
    calls = []
    fake = iter(range(100))
    samples = interleaved_samples({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
                                  repeats=3, warmup=1, clock=lambda: next(fake))
    assert calls == ["a", "b"] + ["a", "b"] * 3
    assert samples == {"a": [1, 1, 1], "b": [1, 1, 1]}  # each turn reads the clock twice
    assert interleaved_times({"a": lambda: None}, repeats=2, clock=iter(range(0, 100, 5)).__next__) == {"a": 5}


def test_spread_and_effect():
    s = spread([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["median"], s["q1"], s["q3"], s["iqr"], s["best"], s["n"]) == (3.0, 2.0, 4.0, 2.0, 1.0, 5)
    # medians 3 and 9, the wider spread is 2 * 2 = 4: 6 / 4
    assert effect_over_spread([1, 2, 3, 4, 5], [5, 7, 9, 11, 13]) == pytest.approx(6 / 4)
    assert effect_over_spread([1, 1], [1, 1]) == 0.0 and effect_over_spread([1, 1], [2, 2]) == np.inf
    with pytest.raises(ValueError, match="at least one"):
        spread([])
    with pytest.raises(ValueError, match="repeats"):
        interleaved_samples({"a": lambda: None}, repeats=0)
