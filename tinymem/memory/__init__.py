"""The memory ledger and the tools that read it.

    ledger.py   the ledger: bytes per bucket and place, registered by owning buffer, released by
                weak reference; holds for saved-for-backward arrays; OutOfMemoryError; pagers
                that move bytes to the host before a budget is exceeded
    tracker.py  track() / Tracker: peaks, the timeline of a step, a budget, the measured peak,
                the process peak, and who holds the peak (top, by_module)
    probes.py   the allocator's own count: tracemalloc on NumPy, CuPy's memory pool on a GPU
    sampler.py  what top / nvidia-smi see, sampled in a thread: monitor(), Monitor
    command.py  `tinymem monitor`: a command and its children sampled, signals passed on, reaped
    nvidia.py   a GPU's used memory and its processes, through NVML or nvidia-smi
    attribution.py  the module path and op stamped on each entry; top and by-module reports
    snapshot.py the window as PyTorch's memory snapshot (Tracker.export_snapshot), for its viewer
    page.py     the window as one offline HTML page (Tracker.export_page; drawn by timeline.html)
    recording.py  Recording: a record made outside the ledger (a PyTorch step), for the page and snapshot
    leaks.py    live_tensors(), find_leaks(step_fn): what grows per step, and what holds it
    shared.py   one simulated device for several processes; fractions, a device queue
    units.py    parse_bytes("64MB"), format_bytes, format_table

The five buckets are ``parameter``, ``gradient``, ``optimizer``, ``activation`` (saved for
backward) and ``workspace``; the places are ``device``, ``host`` and ``disk``.
"""
from .ledger import (BUCKETS, LEDGER, PLACES, Ledger, OutOfMemoryError, add_pager, hold, holds, live_bytes,
                     locate, mark, owner_of, register, register_bytes, release, remove_pager, unhold)
from . import attribution
from .leaks import find_leaks, live_tensors
from .command import CommandMonitor
from .recording import Recording
from .sampler import Monitor, monitor
from .shared import SharedDevice, device_name, device_queue, set_per_process_memory_fraction
from .tracker import Tracker, track
from .units import format_bytes, format_table, parse_bytes

__all__ = ["BUCKETS", "PLACES", "LEDGER", "Ledger", "OutOfMemoryError", "register", "register_bytes",
           "release", "hold", "unhold", "add_pager", "remove_pager", "holds", "locate", "live_bytes", "mark", "owner_of", "track",
           "Tracker", "parse_bytes", "format_bytes", "format_table", "attribution", "monitor", "Monitor",
           "CommandMonitor", "Recording", "live_tensors", "find_leaks", "SharedDevice", "device_queue", "device_name",
           "set_per_process_memory_fraction"]
