"""A tracking window as PyTorch's memory snapshot, for PyTorch's own memory viewer.

``torch.cuda.memory._snapshot()`` returns a dict (read in torch 2.13's ``torch/cuda/memory.py``
and ``torch/cuda/_memory_viz.py``)::

    {"segments": [{"device", "address", "total_size", "allocated_size", "stream", "blocks": [
                      {"address", "size", "requested_size", "state", "frames"}]}],
     "device_traces": [[{"action", "addr", "size", "stream", "frames", "time_us"}]]}

``segments`` is the allocator's state at one moment; ``device_traces`` the events that led
there: ``alloc``, then ``free_requested`` and ``free_completed`` (one after the other here: a
single stream frees at once). Each event has ``frames``, the stack that made the block.

:func:`build` writes a :class:`~tinymem.memory.Tracker` window in that form, with no torch:

- **Addresses are synthesized.** The ledger knows sizes and lifetimes, not addresses, so a
  first-fit allocator model lays the blocks out in one segment (the first hole that fits, or
  the top). Block sizes are the ledger's bytes exactly (no rounding to 512 bytes as CUDA's
  caching allocator does), so the viewer's live bytes are the ledger's to the byte; the
  segment is the model's high-water mark. Zero-byte arrays are left out (they hold nothing).
- **Frames say what the ledger knows**, innermost first: the bucket (the format has no field
  for it), the op, the module path, dtype and shape, then the user's own file and line. A
  bucket change of a live array (saved for backward, then used) is a free and an alloc at the
  same address, as the ledger's timeline has it.
- ``at="end"`` gives the state when the window closed, as ``_snapshot()`` after the step;
  ``at="peak"`` cuts the trace at the window's peak, as ``_snapshot()`` called right there.

Memory and time: one dict per event and per live block, a few hundred bytes each; the layout
costs O(holes) per allocation.
"""
import bisect
import pickle

from ..measure.files import write_atomically
from .attribution import describe

BASE_ADDRESS = 0x7F0000000000  # where the modelled segment starts (a plausible device address)


class FirstFit:
    """The allocator model: holes kept sorted by address, each allocation in the first hole that
    fits or at the top, each free merged with its neighbours."""

    def __init__(self):
        self.starts, self.sizes, self.top = [], [], 0

    def alloc(self, nbytes):
        for i, size in enumerate(self.sizes):
            if size >= nbytes:
                addr = self.starts[i]
                if size == nbytes:
                    del self.starts[i], self.sizes[i]
                else:
                    self.starts[i], self.sizes[i] = addr + nbytes, size - nbytes
                return addr
        addr, self.top = self.top, self.top + nbytes
        return addr

    def free(self, addr, nbytes):
        i = bisect.bisect(self.starts, addr)
        self.starts.insert(i, addr)
        self.sizes.insert(i, nbytes)
        if i + 1 < len(self.starts) and addr + nbytes == self.starts[i + 1]:  # merge the next hole
            self.sizes[i] += self.sizes.pop(i + 1)
            del self.starts[i + 1]
        if i > 0 and self.starts[i - 1] + self.sizes[i - 1] == addr:  # merge into the previous one
            self.sizes[i - 1] += self.sizes.pop(i)
            del self.starts[i]
        if self.starts and self.starts[-1] + self.sizes[-1] == self.top:  # a hole at the top shrinks it
            self.top = self.starts.pop()
            self.sizes.pop()


def frames(bucket, detail, label, module):
    """The event's stack, innermost first, as ``{"filename", "line", "name"}`` dicts."""
    shape, dtype, site = detail
    out = [{"filename": "[bucket]", "line": 0, "name": bucket},
           {"filename": "[op]", "line": 0, "name": label or "-"},
           {"filename": "[module]", "line": 0, "name": "(model)" if module == "" else module or "(no module)"}]
    if shape is not None:
        out.append({"filename": "[array]", "line": 0, "name": f"{dtype} {shape}"})
    if site is not None:
        out.append({"filename": site[0], "line": site[1], "name": site[2]})
    return out


def check_window(tracker):
    """Refuse a window that cannot be exported: still open, without a timeline, or empty."""
    if not tracker.closed:
        raise RuntimeError("the tracking window is still open: export it after its with-block ends")
    if not tracker.keep_timeline:
        raise ValueError("this window was opened with timeline=False and kept no events: "
                         "open it with memory.track() (timeline=True) to export it")
    if not any(e[1] != "mark" for e in tracker.events):
        raise ValueError("the tracking window is empty: no array was made or freed on the device "
                         "inside it; run the step inside the with-block")


def peak_index(tracker):
    """Index in ``tracker.events`` of the first event that reached the window's peak (-1: the
    peak is the state on entry)."""
    peak = tracker.peak()
    for i, e in enumerate(tracker.events):
        if e[1] != "mark" and sum(e[5]) == peak:
            return i
    return -1


def build(tracker, at="end"):
    """The snapshot dict of a closed ``tracker`` window (see the module's docstring)."""
    if at not in ("end", "peak"):
        raise ValueError(f"at must be 'end' or 'peak', got {at!r}")
    check_window(tracker)
    events = tracker.events if at == "end" else tracker.events[:peak_index(tracker) + 1]
    heap, live, trace = FirstFit(), {}, []  # live: entry -> (addr, nbytes, frames)
    for entry, bucket in tracker.entered.items():
        if entry.nbytes:
            detail = tracker.details.get(entry) or describe(entry, site=False)  # made before the window
            live[entry] = (heap.alloc(entry.nbytes), entry.nbytes, frames(bucket, detail, entry.label, entry.module))
    for i, (t, kind, bucket, nbytes, label, _, entry) in enumerate(events):
        if kind == "mark" or not nbytes:
            continue
        if kind == "alloc":
            moved = entry in live  # a bucket change: the free just before kept the address
            addr = live[entry][0] if moved else heap.alloc(nbytes)
            stack = frames(bucket, tracker.details[entry], label, entry.module)
            live[entry] = (addr, nbytes, stack)
            trace.append(_event("alloc", addr, nbytes, stack, t))
            continue
        addr, _, stack = live[entry]
        trace.append(_event("free_requested", addr, nbytes, stack, t))
        trace.append(_event("free_completed", addr, nbytes, stack, t))
        following = events[i + 1] if i + 1 < len(events) else None
        if following is not None and following[1] == "alloc" and following[6] is entry:
            continue  # the ledger moves it to another bucket: same buffer, same address
        del live[entry]
        heap.free(addr, nbytes)
    return {"segments": [_segment(live.values(), heap.top)], "device_traces": [trace]}


def _event(action, addr, nbytes, stack, t):
    return {"action": action, "addr": BASE_ADDRESS + addr, "size": nbytes, "stream": 0, "frames": stack,
            "time_us": int(t * 1e6)}


def _segment(blocks, total):
    """The one modelled segment: its live blocks in address order, the gaps as inactive blocks."""
    out, cursor = [], 0
    for addr, nbytes, stack in sorted(blocks, key=lambda b: b[0]):
        if addr > cursor:
            out.append({"address": BASE_ADDRESS + cursor, "size": addr - cursor, "requested_size": 0,
                        "state": "inactive", "frames": []})
        out.append({"address": BASE_ADDRESS + addr, "size": nbytes, "requested_size": nbytes,
                    "state": "active_allocated", "frames": stack})
        cursor = addr + nbytes
    if total > cursor:
        out.append({"address": BASE_ADDRESS + cursor, "size": total - cursor, "requested_size": 0,
                    "state": "inactive", "frames": []})
    allocated = sum(b["size"] for b in out if b["state"] == "active_allocated")
    return {"device": 0, "address": BASE_ADDRESS, "total_size": total, "allocated_size": allocated,
            "active_size": allocated, "requested_size": allocated, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "blocks": out}


def dump(snapshot, f):
    """Pickle ``snapshot`` into the open binary file ``f`` (protocol 4, as PyTorch reads it)."""
    pickle.dump(snapshot, f, protocol=4)


def write(snapshot, path):
    """Pickle ``snapshot`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    write_atomically(path, lambda f: dump(snapshot, f), suffix=".pickle")
