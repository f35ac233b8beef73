"""Property tests (Hypothesis) of ``parse_bytes``: exact for every well-formed size, a
ValueError (never another exception) for anything else."""
from decimal import Decimal

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tinymem.memory import parse_bytes
from tinymem.memory.units import _UNITS

FAST = settings(max_examples=50, deadline=None)


@FAST
@given(whole=st.integers(0, 10**6), frac=st.integers(0, 999), unit=st.sampled_from(sorted(_UNITS)),
       upper=st.booleans(), space=st.sampled_from(["", " "]))
@example(whole=2, frac=300, unit="kb", upper=False, space="")  # 2.3KB: float arithmetic gave 2299
def test_decimal_sizes_are_exact(whole, frac, unit, upper, space):
    text = f"{whole}.{frac:03d}{space}{unit.upper() if upper else unit}"
    assert parse_bytes(text) == int(Decimal(f"{whole}.{frac:03d}") * _UNITS[unit])


@FAST
@given(st.integers(0, 2**62))
def test_whole_byte_counts_pass_through(n):
    assert parse_bytes(n) == n == parse_bytes(str(n))


@FAST
@given(st.one_of(st.text(max_size=12), st.floats(), st.integers(-2**70, 2**70), st.booleans(),
                 st.none(), st.lists(st.integers(), max_size=2)))
def test_anything_else_is_a_size_or_a_value_error(value):
    try:
        n = parse_bytes(value)
    except ValueError as exc:
        assert "size" in str(exc) or "memory" in str(exc)
        return
    assert n is None if value is None else (isinstance(n, int) and 0 <= n <= 2**63)
