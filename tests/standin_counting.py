"""Kernel launches and host syncs of the stand-in for CuPy (``tests/standin_cupy.py``), counted.

On a GPU every elementwise op, reduction, gather, scatter, copy and random draw is a kernel
launch, and every read of device memory on the host (``float()``, ``int()``, ``bool()``,
``.item()``, ``.tolist()``, ``.get()``, ``asnumpy``) stalls the host until the device is done,
as does an operation whose result's size depends on the values (``nonzero``, ``unique``, a
boolean mask: CuPy reads the count on the host to allocate it).
Inside ``with counting() as counts:`` the stand-in counts both: ``counts.launches``,
``counts.syncs``, ``counts.generators`` (random generators built) and ``counts.report()``,
which names the line of each. Budgets on them are ordinary tests.

ONE hook, :func:`record`, reached from the stand-in's two funnels: :func:`launched` from
``dispatch`` (every device operation), ``record("sync")`` from ``to_host`` (every host read) and
from ``dispatch`` for the operations sized on the host (``standin_cupy.SIZED_ON_HOST``).
The rules, as on CuPy:

- an operation whose result is a view of an input (a slice, ``reshape``, ``.T``, ``astype``
  with ``copy=False``, ``ascontiguousarray`` of a contiguous array) runs no kernel, nor does
  one in :data:`NO_KERNEL` (``empty``: an uninitialised buffer); with ``out=`` it is a launch;
- a gather (an index array, a list or a mask) copies: a launch;
- a launch inside another is not counted again: ``with fused_kernel(name):`` around the ufuncs
  of one fused kernel's Python body (``tinymem.fused``) counts them as the one kernel CuPy
  compiles from it.
"""
import contextlib
import sys
import threading

NO_KERNEL = {"empty", "empty_like", "shape", "ndim", "size", "result_type", "can_cast", "iscomplexobj"}
_counting = {"blocks": []}
# How deep this thread is inside a launch: per thread, so that another thread's kernel in flight
# does not hide this thread's launches (a shared depth counted them as nested: 0 of 3).
_depth = threading.local()
_FIELDS = {"launch": "launches", "sync": "syncs", "generator": "generators"}
_SKIP = ("/standin_cupy.py", "/standin_counting.py", "/contextlib.py", "/tinymem/fused.py")


class Counts:
    """What ran inside one :func:`counting` block: ``launches``, ``syncs``, ``generators`` and
    ``sites``, each ``(kind, "file:line function")`` with its count, to print when a budget fails."""

    def __init__(self):
        self.launches = self.syncs = self.generators = 0
        self.sites = {}

    def report(self):
        rows = sorted(self.sites.items(), key=lambda item: -item[1])
        return (f"{self.launches} launches, {self.syncs} syncs, {self.generators} generators:\n"
                + "\n".join(f"  {n:4d} {kind:9s} {site}" for (kind, site), n in rows))


def active():
    """Whether a :func:`counting` block is open (outside one nothing is looked at: no cost)."""
    return bool(_counting["blocks"])


def _site():
    """The first caller outside the stand-in, NumPy and tinymem's kernel runner."""
    frame = sys._getframe(1)
    while frame is not None and ("/numpy/" in frame.f_code.co_filename
                                 or frame.f_code.co_filename.endswith(_SKIP)):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{'/'.join(frame.f_code.co_filename.split('/')[-2:])}:{frame.f_lineno} {frame.f_code.co_name}"


def record(kind, site=None):
    """The one counting hook: one ``kind`` ("launch", "sync", "generator") at ``site``."""
    if not _counting["blocks"]:
        return
    where = site or _site()
    field = _FIELDS[kind]
    for counts in _counting["blocks"]:
        setattr(counts, field, getattr(counts, field) + 1)
        counts.sites[kind, where] = counts.sites.get((kind, where), 0) + 1


def _level():
    """How many launches this thread is inside."""
    return getattr(_depth, "n", 0)


class Launch:
    """``with Launch(site):`` around a device operation: one launch, unless inside another."""

    def __init__(self, site=None):
        self.site = site

    def __enter__(self):
        if _level() == 0:
            record("launch", self.site)
        _depth.n = _level() + 1
        return self

    def __exit__(self, *exc):
        _depth.n -= 1


def fused_kernel(name):
    """``with fused_kernel(name):`` around the ufuncs of one fused kernel's Python body: one launch."""
    return Launch(f"fused kernel {name}")


def launched(func, call, is_view):
    """``call()`` for the device operation ``func``, counted as one launch unless it runs inside
    another, is in :data:`NO_KERNEL`, or ``is_view(result)`` says it only viewed an input."""
    if _level() or not _counting["blocks"] or getattr(func, "__name__", "") in NO_KERNEL:
        return call()
    site = _site()
    _depth.n = _level() + 1
    try:
        result = call()
    finally:
        _depth.n -= 1
    if not is_view(result):
        record("launch", site)
    return result


@contextlib.contextmanager
def counting():
    """Count launches, syncs and generators inside the block; yields a :class:`Counts`."""
    counts = Counts()
    _counting["blocks"].append(counts)
    try:
        yield counts
    finally:
        _counting["blocks"].remove(counts)
