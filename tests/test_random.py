"""tinymem.random's seed and shapes, checked as PyTorch's manual_seed and NumPy's generator do."""
import numpy as np
import pytest

from tinymem import backend, random


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_negative_seed_draws_as_its_value_modulo_2_64(standin, device):
    """torch.manual_seed(-1) is accepted (taken modulo 2**64); the seed was kept as -1 and
    every later draw raised NumPy's 'expected non-negative integer'."""
    draws = []
    for seed in (-1, 2 ** 64 - 1):
        random.manual_seed(seed)
        draws.append(backend.to_numpy(random.rand((5,), device)))
        assert random.get_rng_state().tolist() == [-1, 1]
    assert np.array_equal(draws[0], draws[1])
    random.set_rng_state(np.array([-1, 0]))
    assert np.array_equal(backend.to_numpy(random.rand((5,), device)), draws[0])


@pytest.mark.parametrize("bad, error", [(1.5, TypeError), ("3", TypeError), (2 ** 64, ValueError),
                                        (-2 ** 63 - 1, ValueError)])
def test_a_seed_that_is_not_an_integer_in_range_is_refused_and_changes_nothing(bad, error):
    random.manual_seed(7)
    random.rand((2,))
    before = random.get_rng_state()
    with pytest.raises(error, match="manual_seed"):
        random.manual_seed(bad)
    assert np.array_equal(random.get_rng_state(), before)
    with pytest.raises(ValueError, match="2 integers"):
        random.set_rng_state([1, 2, 3])
    assert np.array_equal(random.get_rng_state(), before)


def test_a_device_draw_refuses_a_negative_dimension_as_the_cpu_does(standin):
    random.manual_seed(0)
    for device in ("cpu", "cuda"):
        with pytest.raises(ValueError, match="negative dimensions"):
            random.rand((2, -1), device)
    assert random.get_rng_state().tolist() == [0, 0]  # the refused draws took no step


def test_threads_drawing_at_once_never_share_a_draw():
    """Each draw takes its own count of the state, under a lock: before, reading the counter and
    advancing it were two steps, so two threads could read the same count and draw the same
    numbers (4 threads x 3000 CPU generators, switching every microsecond: hundreds of repeated
    streams), where PyTorch's generator is locked. After them the counter has counted each draw."""
    import sys
    import threading

    random.manual_seed(7)
    first_words = []

    def draw():
        for _ in range(3000):
            first_words.append(int(random.generator().integers(2 ** 62)))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        threads = [threading.Thread(target=draw) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert len(set(first_words)) == len(first_words) == 12000
    assert random.get_rng_state().tolist() == [7, 12000]
