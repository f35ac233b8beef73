"""Replaying a profiled PyTorch step: the allocator's running total, its peak and the buckets there.

This file has no torch in it: ``torch_profile.py`` turns the profiler's records into the plain
values below, and :func:`replay` does the arithmetic, so the method can be read (and tested) on
its own.

- A :class:`Block` is one allocation: its address, bytes, birth and death (profiler time, ns;
  ``None``: alive at the end) and the op that made it.
- The running total starts at the **baseline**, the blocks alive when the step starts, and moves
  by each block's signed bytes at its birth and death. The peak is the first moment the total
  is highest (a tie keeps the earlier moment).
- A block's **bucket** can change during its life (an output saved for backward becomes an
  activation; a gradient made by a backward node becomes a parameter's ``.grad`` when it is
  accumulated). Each block keeps its labels with their times; its bucket at time ``t`` is its
  label of highest rank (:data:`RANK`) given at or before ``t``. A weight saved for backward
  stays a parameter; the input batch saved by the first layer stays an input.
- **in_flight**: a block born inside a backward node that outlives the node, until it becomes
  a ``.grad`` or dies before the optimizer starts: the gradients flowing between nodes. A block
  born and freed inside one node is that node's temporary.

Memory and time: one Block per allocation; two passes over the sorted births and deaths.
"""
from dataclasses import dataclass, field

# Highest rank first: what keeps a block alive for longer wins the label.
RANK = ("parameter", "buffer", "optimizer", "input", "gradient", "activation", "in_flight", "temporary")
BUCKETS = RANK
PHASES = ("forward", "backward", "optimizer")


@dataclass(eq=False)
class Block:
    """One allocation. ``labels``: ``(time, bucket)`` pairs, the bucket from that time on."""
    ptr: int
    nbytes: int
    born: int  # ns; at or before the step's start for a block alive when it starts
    died: int = None  # ns; None: alive when the record ends
    op: str = "-"
    node: str = None  # the backward node (e.g. "MmBackward0") the block was made in
    node_end: int = None  # when that node finished
    labels: list = field(default_factory=list)

    def bucket_at(self, t):
        given = [bucket for when, bucket in self.labels if when <= t] or ["temporary"]
        return min(given, key=RANK.index)


@dataclass
class Peak:
    """Where the running total was highest: the bytes, the buckets then, the block that reached it
    and every block alive then."""
    nbytes: int
    time: int
    buckets: dict
    block: Block  # None: the peak is the state when the step started
    live: list


def label_in_flight(blocks, optimizer_start):
    """Give ``in_flight`` to the blocks a backward node made that outlive it (see the module's
    docstring). ``optimizer_start``: when the optimizer phase starts (None: it never does)."""
    for b in blocks:
        if b.node is None or (b.died is not None and b.died <= b.node_end):
            continue
        becomes_grad = any(bucket == "gradient" for _, bucket in b.labels)
        dies_in_backward = b.died is not None and (optimizer_start is None or b.died <= optimizer_start)
        if becomes_grad or dies_in_backward:
            b.labels.append((b.born, "in_flight"))


def timeline(baseline, blocks, start):
    """The births and deaths after ``start`` in time order: ``(time, +-bytes, block)``.
    ``baseline``: the blocks alive at ``start`` (only their deaths are events)."""
    out = [(b.born, b.nbytes, b) for b in blocks if b.born > start]
    out += [(b.died, -b.nbytes, b) for b in list(baseline) + list(blocks) if b.died is not None and b.died > start]
    out.sort(key=lambda e: (e[0], e[1] < 0))  # at one instant, births before deaths: the higher total
    return out


def replay(baseline, blocks, start):
    """The :class:`Peak` of the running total from ``start`` on (see the module's docstring)."""
    events = timeline(baseline, blocks, start)
    total = best = sum(b.nbytes for b in baseline)
    best_i = -1
    for i, (_, delta, _) in enumerate(events):
        total += delta
        if total > best:
            best, best_i = total, i
    t = start if best_i < 0 else events[best_i][0]
    live = set(baseline)
    for _, delta, b in events[:best_i + 1]:
        (live.add if delta > 0 else live.discard)(b)
    buckets = dict.fromkeys(BUCKETS, 0)
    for b in live:
        buckets[b.bucket_at(t)] += b.nbytes
    return Peak(best, t, buckets, None if best_i < 0 else events[best_i][2], list(live))


def phase_at(t, backward_start, optimizer_start):
    """'forward' before the first backward node, 'optimizer' from ``optimizer.step`` on, else 'backward'."""
    if optimizer_start is not None and t >= optimizer_start:
        return "optimizer"
    if backward_start is not None and t >= backward_start:
        return "backward"
    return "forward"
