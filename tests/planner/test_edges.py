"""The planner's edges as a user with bad inputs meets them: each refused with one line that
says what was wrong, and the table's rows consistent with the summary under them."""
import pytest

from tinymem.planner import analytic


@pytest.mark.parametrize("params", [[(-3, 4)], {(3, -4): 2}, {(3, 4): -2}, [(2.5, 4)], -100])
def test_model_states_refuses_negative_or_fractional_sizes(params):
    with pytest.raises(ValueError, match="whole"):
        analytic.model_states(params)


def test_model_states_refuses_negative_flat_buffer_units():
    with pytest.raises(ValueError, match="units"):
        analytic.model_states(100, stage=1, ranks=2, units=[-3])
    assert analytic.model_states(100, stage=1, ranks=2, units=[4])["parameter"] == 8
