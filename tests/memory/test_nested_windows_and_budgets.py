"""Nested tracking windows keep the outer measured peak; budgets refuse what is not a size."""
import numpy as np
import pytest

import tinymem as tm
from tinymem import memory


def test_an_inner_window_does_not_erase_the_outer_measured_peak():
    with memory.track() as outer:
        big = tm.tensor(np.ones(500_000))  # 4,000,000 B, freed before the inner window opens
        del big
        with memory.track() as inner:
            small = tm.tensor(np.ones(100))
        del small
    assert outer.peak_delta() == 4_000_000
    assert outer.measured_peak() >= 4_000_000, (outer.measured_peak(), outer.table())
    assert inner.measured_peak() < 100_000


def test_the_outer_peak_counts_what_came_after_the_inner_window():
    with memory.track() as outer:
        with memory.track():
            pass
        big = tm.tensor(np.ones(250_000))
        del big
    assert outer.measured_peak() >= 2_000_000


@pytest.mark.parametrize("bad", [-1, float("nan"), float("inf"), "1.2.3MB", True, "-5MB", "64 parsecs", [64]])
def test_a_budget_that_is_not_a_size_is_refused_with_a_message(bad):
    with pytest.raises(ValueError, match="size"):
        with memory.track(budget=bad):
            pass


@pytest.mark.parametrize("text, expected", [("64MB", 64 * 10**6), ("1.5GiB", 3 * 2**29), ("2.3KB", 2300),
                                            (" 7 b ", 7), ("1e3", 1000), (".5KiB", 512), (3.9, 3), (0, 0)])
def test_sizes_are_read_exactly(text, expected):
    assert memory.parse_bytes(text) == expected
