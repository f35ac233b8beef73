"""Sizes in bytes: read ``"64MB"`` or ``"1.5GiB"``, print bytes for people, tabulate buckets."""
import decimal
import math
import numbers
import re

from ..checks import real_number
from .ledger import BUCKETS

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}
_LARGEST = 2**63
_SIZE = re.compile(r"\s*((?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*([a-zA-Z]*)\s*")


def parse_bytes(value):
    """``"64MB"`` -> 64_000_000, ``"1.5GiB"`` -> 1610612736; whole numbers of bytes pass through.

    ``None`` means no limit. A size is a finite number of bytes >= 0 (fractions round down);
    anything else (-1, NaN, inf, True, "1.2.3MB") raises ValueError saying what to write.
    """
    if value is None:
        return None
    hint = "write a number of bytes >= 0, e.g. 1048576, '64MB' or '1.5GiB' (None for no limit)"
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):
        raise ValueError(f"cannot read {value!r} ({type(value).__name__}) as a size; {hint}")
    if isinstance(value, str):
        match = _SIZE.fullmatch(value)
        if not match or match.group(2).lower() not in _UNITS:
            raise ValueError(f"cannot read {value!r} as a size; {hint}")
        # Decimal, not float: "2.3KB" is 2300 bytes, where 2.3 * 1000 in floats is 2299.999...
        number, scale = decimal.Decimal(match.group(1)), _UNITS[match.group(2).lower()]
    else:
        number, scale = value, 1
    finite = number.is_finite() if isinstance(number, decimal.Decimal) else math.isfinite(number)
    if not finite or number < 0:
        raise ValueError(f"a size must be finite and >= 0, got {value!r}; {hint}")
    if number > _LARGEST / scale:
        raise ValueError(f"{value!r} is more than 2**63 bytes, larger than any memory; {hint}")
    if isinstance(number, numbers.Integral):
        return int(number) * scale
    # float() first: Decimal takes neither a NumPy float nor a Fraction
    return int((number if isinstance(number, decimal.Decimal) else decimal.Decimal(float(number))) * scale)


def format_bytes(n):
    real_number("format_bytes: n (a number of bytes)", n)
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"


def format_table(by_bucket, title="live device bytes"):
    """A small text table of bytes per bucket, used by errors and failing memory tests."""
    lines = [title]
    for bucket in BUCKETS:
        lines.append(f"  {bucket:<10} {by_bucket.get(bucket, 0):>14,d} B  ({format_bytes(by_bucket.get(bucket, 0))})")
    lines.append(f"  {'total':<10} {sum(by_bucket.values()):>14,d} B")
    return "\n".join(lines)
