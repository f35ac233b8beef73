"""The memory ledger: who holds which bytes, where, and at what peak.

Training memory has five buckets: ``parameter`` (weights), ``gradient`` (``.grad`` of
parameters), ``optimizer`` (optimizer state), ``activation`` (tensors saved for backward) and
``workspace`` (everything else the framework allocates: op outputs, gradients flowing backward).
Each byte also has a place: ``device`` (the accelerator, or on the CPU the simulated device),
``host`` (host RAM reached by offload) or ``disk``.

Every array the framework creates is registered here by its *owning buffer* (a view is counted
through the array that owns the memory) and released by a weak-reference callback when that
buffer dies. The ledger therefore follows real lifetimes, which is why it can be held against
the allocator's own count (``Tracker.measured_peak`` in ``tracker.py``).

An array saved for backward is *held*: while held, a workspace array counts as ``activation``;
when the last hold is released (backward used it) it falls back to ``workspace``. Parameters,
gradients and optimizer state keep their bucket even when saved.

Memory cost of the ledger itself: one small record per live array (about 200 bytes), not
counted in any bucket.

Threads: the ledger is one per process (``LEDGER``), shared by every thread in it, and one
re-entrant lock (``Ledger.lock``) orders every change to it; see :class:`Ledger`. Processes do
not share it: a forked child starts with its own copy and a fresh lock, and processes that
share one simulated device meet in ``shared.py``, not here.
"""
import os
import threading
import weakref

import numpy as np

from ..checks import is_int
from .attribution import SCOPE


_ndarray = np.ndarray

BUCKETS = ("parameter", "gradient", "optimizer", "activation", "workspace")
PLACES = ("device", "host", "disk")
# When an array is registered twice, the more specific owner wins (a saved weight stays a weight).
_PRIORITY = {"workspace": 0, "activation": 1, "gradient": 2, "optimizer": 3, "parameter": 4}


class OutOfMemoryError(RuntimeError):
    """Device bytes would exceed the budget of an active :func:`track` window."""


class _Entry(weakref.ref):
    """The record of one owning buffer, and the weak reference to it whose death releases it.

    One object per live array is the ledger's whole cost per op, so the record *is* the weak
    reference (a subclass with slots) instead of a record holding a reference and a closure.
    ``label`` and ``module`` say which op and module made the array (attribution; ``None`` when
    it is switched off). ``counts`` is ``ledger.live[place]``, kept here so that counting the
    entry's bytes in or out, several times per op, needs no dictionary lookup for its place.
    """
    __slots__ = ("key", "nbytes", "place", "counts", "base", "holds", "bucket", "label", "module")
    # A weak reference hashes and compares its referent (an array: unhashable, elementwise ==);
    # an entry is a record, so it is hashed and compared by identity.
    __hash__ = object.__hash__

    def __eq__(self, other):
        return self is other

    @property
    def ref(self):
        """The weak reference to the buffer: the entry itself (``entry.ref()`` is the array)."""
        return self


class Ledger:
    """Live bytes per place and bucket, kept exact by weak references to owning buffers.

    ``live[place][bucket]`` is the count. It is a dict of dicts rather than one dict keyed by
    ``(place, bucket)``: every op updates it several times, and a string key is found by
    identity with its hash cached, where a tuple key is built, hashed and compared each time.

    Threads: every change (register, release or an array's death, hold and unhold, a bucket
    move, the trackers' events, peaks and budget checks, opening and closing a window) happens
    under ``lock``, so that, whichever threads allocate and free at once:

    - an array is counted once, and its bytes leave the counts exactly once;
    - each tracker sees the events in the order the counts changed, each event with the
      totals just after it (the totals of a timeline are the running sums of its events), so
      an array's free comes after its alloc and the peak is at least every running total.

    The lock is re-entrant: a weak-reference callback (an array's death) can run inside a
    change made by the same thread, when that change drops the last reference or sets off the
    garbage collector, and a pager asked for room under a budget registers its host copies.
    Reads (:meth:`bytes`, :meth:`by_bucket`, :func:`locate`) take no lock: each returns a value
    the ledger held at some instant, but two reads may straddle another thread's change. Cost:
    one uncontended acquire and release of the lock per change.
    """

    def __init__(self):
        self.entries = {}
        self.live = {p: {b: 0 for b in BUCKETS} for p in PLACES}
        self.trackers = []
        self.pagers = []  # weak references to objects that can move device bytes away on demand
        self.lock = threading.RLock()
        self._death_callback = self._on_death  # one bound method, not a new one per array

    # -- registration -------------------------------------------------------------------
    def register(self, array, bucket="workspace", place="device", owner=None, label=None, nbytes=None):
        """Count ``array``'s owning buffer in ``bucket`` at ``place``; returns ``array``.

        ``owner`` is an object whose death releases the bytes, for buffers that cannot be
        weakly referenced. Registering an already known buffer only raises its bucket. With
        ``nbytes``, ``owner`` alone is counted, for that many bytes (see :meth:`register_bytes`).
        ``label`` (a str, or None for the op running now) names the array on pages and snapshots.
        """
        # This runs for every op's output, so it is one function (no helper call) and the common
        # case comes first: a fresh NumPy (or device) array owns its memory (and asking one for
        # __array_interface__, as _countable does, builds a dict).
        if type(array) in _OWNING_TYPES and array.base is None:
            root = array
        elif nbytes is not None:
            root = owner
        else:
            root = owner_of(array)
            if type(root) is not _ndarray and not _countable(root):
                return array
            if root is array and hasattr(root, "__cuda_array_interface__"):
                _OWNING_TYPES.add(type(root))  # a device array type: next time, the fast path
        # The lock is taken by hand: `with` costs twice an acquire and a release, here as much as
        # a quarter of the register itself.
        lock = self.lock
        lock.acquire()  # from the lookup to the event: another thread registering it waits
        try:
            key = id(root)
            entry = self.entries.get(key)
            # The names are checked by the lookups themselves (try costs nothing until it catches):
            # an unknown or unhashable one raises KeyError or TypeError, reported as what it is.
            if entry is not None:
                try:
                    higher = _PRIORITY[bucket] > _PRIORITY[entry.base]
                except (KeyError, TypeError):
                    raise ValueError(f"unknown bucket {bucket!r}; choose one of {', '.join(BUCKETS)}") from None
                if higher:
                    self._set_bucket(entry, bucket, bucket)
                return array
            try:
                counts = self.live.get(place)  # the counts of the place, and a check of both names
            except TypeError:
                counts = None
            if counts is None:
                raise ValueError(f"unknown place {place!r}; choose one of {', '.join(PLACES)}")
            try:
                known = bucket in counts
            except TypeError:
                known = False
            if not known:
                raise ValueError(f"unknown bucket {bucket!r}; choose one of {', '.join(BUCKETS)}")
            if label is not None and not isinstance(label, str):  # pages and snapshots show it as text
                raise TypeError(f"memory.register's label must be a str naming the array, e.g. 'replay index', "
                                f"got {type(label).__name__}")
            if nbytes is None:
                nbytes = root.nbytes
            trackers = self.trackers
            if trackers and place == "device":
                for tracker in trackers:
                    tracker._check_budget(nbytes, bucket, label)
            try:
                entry = _Entry(root if owner is None else owner, self._death_callback)
            except TypeError:  # "cannot create weak reference to 'int' object"
                raise TypeError(f"owner must be an object that can be weakly referenced (an array, a Tensor, "
                                f"a Module), got a {type(owner).__name__}") from None
            # Attribution: the op and module running now (both None when it is switched off).
            scope = SCOPE.current
            (entry.key, entry.nbytes, entry.place, entry.counts, entry.base, entry.holds, entry.bucket,
             entry.label, entry.module) = (key, nbytes, place, counts, bucket, 0, bucket, label or scope.op,
                                           scope.path)
            self.entries[key] = entry
            counts[bucket] += nbytes
            if trackers:
                self._event("alloc", bucket, place, nbytes, entry.label, entry)
            return array
        finally:
            lock.release()

    def register_bytes(self, owner, nbytes, bucket, place, label=None):
        """Count ``nbytes`` that are not an array (a file on disk, say) until ``owner`` dies.
        An owner counts once: registering it again raises instead of ignoring the new bytes."""
        with self.lock:  # from the check to the count: another thread counting this owner waits
            if id(owner) in self.entries:
                raise ValueError(f"register_bytes: this {type(owner).__name__} is already counted "
                                 f"({self.entries[id(owner)].nbytes} bytes); give each counted buffer "
                                 "its own owner object")
            if not (is_int(nbytes) or (isinstance(nbytes, float) and nbytes.is_integer())) or nbytes < 0:
                raise ValueError(f"register_bytes: nbytes must be a whole number >= 0, got {nbytes!r}")
            self.register(None, bucket, place, owner, label, int(nbytes))

    def _on_death(self, entry):
        # A newer buffer may have taken the dead one's id already: only its own entry goes.
        lock = self.lock
        lock.acquire()  # by hand, as in register: this runs for every array's death
        try:
            entries, key = self.entries, entry.key
            if entries.get(key) is entry:
                del entries[key]
                entry.counts[entry.bucket] -= entry.nbytes
                if self.trackers:
                    self._event("free", entry.bucket, entry.place, entry.nbytes, entry.label, entry)
        finally:
            lock.release()

    def release(self, array_or_owner):
        """Stop counting a buffer now (for storage freed by hand, such as a deleted file)."""
        root = owner_of(array_or_owner) if hasattr(array_or_owner, "nbytes") else array_or_owner
        entry = self.entries.get(id(root))
        if entry is not None:
            self._on_death(entry)

    # -- saved-for-backward holds ---------------------------------------------------------
    def hold(self, array):
        """Mark ``array`` as saved for backward (counted as ``activation`` while held)."""
        # By the array's own id first: a saved array usually owns its memory, and a view, being
        # alive, cannot share its id with a live buffer, so only a miss walks to the owner.
        with self.lock:
            entries = self.entries
            entry = entries.get(id(array)) or entries.get(id(owner_of(array)))
            if entry is None:
                self.register(array, "workspace", "device")
                entry = entries.get(id(owner_of(array)))
                if entry is None:  # a Python or NumPy scalar: nothing to count
                    return
            entry.holds += 1
            if entry.holds == 1 and entry.base == "workspace":
                if self.trackers:
                    self._move(entry, "activation")
                else:  # _move without trackers, written out: hold and unhold run for every saved array
                    counts, nbytes = entry.counts, entry.nbytes
                    counts["workspace"] -= nbytes
                    counts["activation"] += nbytes
                    entry.bucket = "activation"

    def unhold(self, array):
        """Undo one :meth:`hold`; the array returns to ``workspace`` when no hold is left."""
        with self.lock:
            entries = self.entries
            entry = entries.get(id(array)) or entries.get(id(owner_of(array)))  # as in hold
            if entry is None or entry.holds == 0:
                return
            entry.holds -= 1
            if entry.holds == 0 and entry.bucket == "activation":
                if self.trackers:
                    self._move(entry, entry.base)
                else:  # as in hold
                    counts, nbytes, base = entry.counts, entry.nbytes, entry.base
                    counts["activation"] -= nbytes
                    counts[base] += nbytes
                    entry.bucket = base

    def _set_bucket(self, entry, bucket, base):
        """Give ``entry`` the owner ``base`` and count it in ``bucket`` (``activation`` instead
        while a workspace array is held)."""
        entry.base = base
        if entry.holds and base == "workspace":
            bucket = "activation"
        if bucket != entry.bucket:
            self._move(entry, bucket)

    def _move(self, entry, bucket):
        """Count ``entry`` in ``bucket`` from now on; trackers see a free, then an alloc."""
        old, counts, nbytes = entry.bucket, entry.counts, entry.nbytes
        counts[old] -= nbytes
        if self.trackers:
            self._event("free", old, entry.place, nbytes, entry.label, entry)
        entry.bucket = bucket
        counts[bucket] += nbytes
        if self.trackers:
            self._event("alloc", bucket, entry.place, nbytes, entry.label, entry)

    # -- paging under a budget -------------------------------------------------------------
    def add_pager(self, pager):
        """Let ``pager`` free device bytes when a budget would be exceeded (the seam of paged
        optimizers, as unified memory pages to the host when the GPU is full).

        ``pager.page_out(nbytes)`` is called, with the bytes still missing, before an
        allocation raises :class:`OutOfMemoryError`; it moves what it can to the host and
        returns. The ledger holds pagers weakly: a pager that dies leaves by itself. Adding a
        pager that is already there changes nothing."""
        if not callable(getattr(pager, "page_out", None)):
            raise TypeError(f"add_pager takes an object with a page_out(nbytes) method (a paged optimizer: "
                            f"techniques.lora.paged(optimizer)), got a {type(pager).__name__}")
        try:
            ref = weakref.ref(pager)
        except TypeError:
            raise TypeError(f"add_pager holds pagers weakly; a {type(pager).__name__} cannot be weakly "
                            "referenced: make the pager an instance of a class of your own") from None
        with self.lock:
            if not any(known() is pager for known in self.pagers):  # twice would ask it twice per shortfall
                self.pagers.append(ref)

    def remove_pager(self, pager):
        with self.lock:
            self.pagers = [ref for ref in self.pagers if ref() is not None and ref() is not pager]

    def page_out(self, nbytes):
        """Ask each live pager in turn to free device bytes until ``nbytes`` are freed."""
        with self.lock:  # the bytes freed are this thread's pagers' doing, not another thread's
            self.pagers = [ref for ref in self.pagers if ref() is not None]
            before = self.bytes()
            for ref in self.pagers:
                freed = before - self.bytes()
                if freed >= nbytes:
                    break
                pager = ref()
                if pager is not None:  # it may have died since the list was pruned
                    pager.page_out(nbytes - freed)

    # -- queries --------------------------------------------------------------------------
    def bytes(self, bucket=None, place="device"):
        """Live bytes of one bucket (or all buckets) at one place (or ``None``: every place)."""
        places = PLACES if place is None else (place,)
        buckets = BUCKETS if bucket is None else (bucket,)
        try:
            return sum(self.live[p][b] for p in places for b in buckets)
        except (KeyError, TypeError):
            raise ValueError(f"unknown bucket {bucket!r} or place {place!r}; buckets are {', '.join(BUCKETS)} "
                             f"(or None for all), places {', '.join(PLACES)} (or None)") from None

    def by_bucket(self, place="device"):
        return dict(self.live[place])

    def _event(self, kind, bucket, place, nbytes, label, entry=None):
        # Called under the lock, right after the counts changed: the trackers read them as the event left them.
        for tracker in self.trackers:
            tracker._record(kind, bucket, place, nbytes, label, entry)

    def _fresh_lock_after_fork(self):
        # A child forked while another thread held the lock would otherwise wait for it forever.
        self.lock = threading.RLock()


# Array types whose instances own their memory when ``base`` is None: NumPy's, and each device
# array type (CuPy's) once the ledger has seen one, so a device op's output skips owner_of and
# _countable as a NumPy one does (register runs for every op's output).
_OWNING_TYPES = {_ndarray}


def owner_of(array):
    """The array that owns the memory ``array`` looks at (itself unless it is a view).

    The ledger counts bytes by this owner, so every view of one buffer is one entry; techniques
    use it to tell whether two arrays share memory."""
    base = getattr(array, "base", None)
    while base is not None and hasattr(base, "nbytes") and hasattr(base, "base"):
        array, base = base, base.base
    return array


def _countable(root):
    """Whether ``root`` is an array buffer the ledger can count (not a NumPy scalar)."""
    if not hasattr(root, "__array_interface__") and not hasattr(root, "__cuda_array_interface__"):
        return False  # a Python or NumPy scalar: a few bytes, and it cannot be weakly referenced
    return not (type(root).__module__ == "numpy" and not isinstance(root, _ndarray))


LEDGER = Ledger()
os.register_at_fork(after_in_child=LEDGER._fresh_lock_after_fork)
register = LEDGER.register
register_bytes = LEDGER.register_bytes
release = LEDGER.release
hold = LEDGER.hold
unhold = LEDGER.unhold
add_pager = LEDGER.add_pager
remove_pager = LEDGER.remove_pager


def locate(array):
    """``(bucket, place)`` under which the ledger counts ``array``'s buffer, or ``None``.

    Techniques ask it where an array already lives: offload leaves parameters alone (they are
    resident anyway) and skips the copy for a gradient that is already on the host.
    """
    entry = LEDGER.entries.get(id(owner_of(array)))
    return None if entry is None else (entry.bucket, entry.place)


def holds(array):
    """How many saved-for-backward holds ``array``'s buffer has now (0: nothing saved it)."""
    entry = LEDGER.entries.get(id(owner_of(array)))
    return 0 if entry is None else entry.holds


def live_bytes(bucket=None, place="device"):
    """Bytes live now in ``bucket`` (all buckets when ``None``) at ``place``."""
    return LEDGER.bytes(bucket, place)


def mark(label):
    """Put a labelled marker (``"forward"``, ``"backward"``, ``"optimizer"``) on every timeline.
    ``label`` is a str: pages and snapshots show it as text."""
    if not isinstance(label, str):
        raise TypeError(f"memory.mark's label must be a str naming the phase, e.g. 'forward', got "
                        f"{type(label).__name__}")
    with LEDGER.lock:
        for tracker in LEDGER.trackers:
            tracker._record("mark", None, None, 0, label)
