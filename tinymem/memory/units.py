"""Sizes in bytes: read ``"64MB"`` or ``"1.5GiB"``, print bytes for people, tabulate buckets."""
import re

from .ledger import BUCKETS

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30}


def parse_bytes(value):
    """``"64MB"`` -> 64_000_000, ``"1.5GiB"`` -> 1610612736; ints pass through."""
    if value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    match = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read {value!r} as a size; write e.g. 1048576, '64MB' or '1.5GiB'")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def format_bytes(n):
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
