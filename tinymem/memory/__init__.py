"""The memory ledger and the tools that read it.

    ledger.py   the ledger: bytes per bucket and place, registered by owning buffer, released by
                weak reference; holds for saved-for-backward arrays; OutOfMemoryError
    tracker.py  track() / Tracker: peaks, the timeline of a step, a budget, the measured peak
    probes.py   the allocator's own count: tracemalloc on NumPy, CuPy's memory pool on a GPU
    units.py    parse_bytes("64MB"), format_bytes, format_table

The five buckets are ``parameter``, ``gradient``, ``optimizer``, ``activation`` (saved for
backward) and ``workspace``; the places are ``device``, ``host`` and ``disk``.
"""
from .ledger import (BUCKETS, LEDGER, PLACES, Ledger, OutOfMemoryError, hold, holds, live_bytes, locate,
                     mark, owner_of, register, register_bytes, release, unhold)
from .tracker import Tracker, track
from .units import format_bytes, format_table, parse_bytes

__all__ = ["BUCKETS", "PLACES", "LEDGER", "Ledger", "OutOfMemoryError", "register", "register_bytes",
           "release", "hold", "unhold", "holds", "locate", "live_bytes", "mark", "owner_of", "track",
           "Tracker", "parse_bytes", "format_bytes", "format_table"]
