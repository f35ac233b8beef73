"""Timings in turns with every sample kept, and their median and spread."""
import time

import numpy as np

from tinymem.measure.timing import interleaved_samples, one_blas_thread, spread


def test_samples_are_taken_in_turns_and_self_timed_functions_report_their_own_time():
    order = []

    def b():
        order.append("b")
        return 0.25

    b.self_timed = True
    samples = interleaved_samples({"a": lambda: order.append("a") or 7.0, "b": b}, repeats=3, warmup=1)
    assert order == ["a", "b"] * 4  # one warm-up each, then three turns
    assert samples["b"] == [0.25, 0.25, 0.25] and len(samples["a"]) == 3
    assert all(0 <= s < 1 for s in samples["a"])  # a returned number is not a time unless marked


def test_spread_is_median_and_quartiles():
    s = spread([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s["median"], s["q25"], s["q75"], s["q1"], s["q3"], s["iqr"]) == (3.0, 2.0, 4.0, 2.0, 4.0, 2.0)


def test_one_blas_thread_still_computes():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    with one_blas_thread():
        start = time.perf_counter()
        assert np.array_equal(a @ a.T, np.einsum("ij,kj->ik", a, a))
    assert time.perf_counter() - start < 5
