"""The ring under mpiexec: its results and bytes against MPI's built-in collectives, and its speed.

Two tasks of :mod:`.worker`, run on every rank:

* :func:`check_ring` (part of ``worker check``): on sub-rings of 2, 3, ..., N ranks (one launch
  of N ranks tests every size, through ``MPI.Comm.Split``) and buffers of sizes that N does and
  does not divide, in float64, checks that the ring's all-reduce and reduce-scatter equal the
  sum taken in the ring's stated order bit for bit (block b: ranks b+1, b+2, ..., b), equal
  MPI's built-in calls to rounding, give every rank the same bits; that its all-gather equals
  MPI's exactly; and that the bytes handed to ``Sendrecv`` equal :func:`.ring.ring_bytes`.
* :func:`time_collectives` (``worker collectives``): each collective, ring and built-in, timed
  in turns (A B B A ...), from the moment the last rank enters a call to the moment the last
  rank leaves it; each sample is the median of a few calls in a row.
"""
import time

import numpy as np

from .comm import Communicator
from .ring import block_size, ring_bytes

KINDS = ("all_reduce", "reduce_scatter", "all_gather")


def rank_inputs(world_size, numel, seed):
    """Every rank's input, the same on every rank (so each can compute the expected result)."""
    return np.stack([np.random.default_rng([seed, r, numel]).standard_normal(numel)
                     for r in range(world_size)])


def sum_in_ring_order(inputs):
    """The sum over ranks that the ring computes: block b added up from rank b+1 round to rank b."""
    n, numel = inputs.shape
    s = block_size(numel, n)
    padded = np.zeros((n, n * s))
    padded[:, :numel] = inputs
    out = np.empty(n * s)
    for b in range(n):
        cols = slice(b * s, (b + 1) * s)
        acc = padded[(b + 1) % n, cols].copy()
        for k in range(2, n + 1):
            acc = acc + padded[(b + k) % n, cols]
        out[cols] = acc
    return out[:numel]


def _run(comm, kind, inputs, numel):
    """One collective on this rank's input; returns its result (a new array)."""
    mine = inputs[comm.rank].copy()
    if kind == "all_reduce":
        return comm.all_reduce(mine)
    if kind == "all_gather":
        return comm.all_gather(mine, np.empty(numel * comm.size))
    return comm.reduce_scatter(mine, np.empty(numel // comm.size))


def _compare(sub, numel, seed):
    """The three collectives on the sub-ring ``sub``: a dict of checks for this size."""
    ring, builtin = Communicator(sub, algorithm="ring"), Communicator(sub)
    n, rank = ring.size, ring.rank
    row = {"ranks": n, "numel": numel}
    for kind in KINDS:
        length = numel * n if kind == "reduce_scatter" else numel  # reduce-scatter needs N | size
        inputs = rank_inputs(n, length, seed)
        got, reference = _run(ring, kind, inputs, length), _run(builtin, kind, inputs, length)
        if kind == "all_gather":
            expected = inputs.reshape(-1)
        else:
            expected = sum_in_ring_order(inputs)
            if kind == "reduce_scatter":
                expected = expected[rank * numel:(rank + 1) * numel]
        everyone = sub.allgather(got)
        row[kind] = {"ring_order_exact": bool(np.array_equal(got, expected)),
                     "max_diff_vs_mpi": float(np.max(np.abs(got - reference))),
                     "same_on_every_rank": all(np.array_equal(a, everyone[0]) for a in everyone)
                     if kind == "all_reduce" else None}
    inputs = rank_inputs(n, numel, seed + 1)
    got = ring.all_reduce(inputs[rank].copy(), op="max")
    row["all_reduce_max_exact"] = bool(np.array_equal(got, inputs.max(axis=0)))
    traffic = ring.traffic.snapshot()
    lengths = {"all_reduce": numel, "reduce_scatter": numel * n, "all_gather": numel * n}
    formula = {k: ring_bytes(k, lengths[k], 8, n) for k in KINDS}
    formula["all_reduce"] *= 2  # the sum and the max
    row["sent"] = {k: traffic[k]["sent"] for k in KINDS}
    row["received"] = {k: traffic[k]["received"] for k in KINDS}
    row["formula"] = formula
    row["recorded_formula"] = {k: traffic[k]["formula"] for k in KINDS}
    return row


def check_ring(comm, numels=(1, 5, 12, 1001), seed=7):
    """Rows of :func:`_compare` for every sub-ring size 2..N and every size; on rank 0 only."""
    MPI = comm.MPI
    rows = []
    for n in range(2, comm.size + 1):
        sub = comm.comm.Split(0 if comm.rank < n else MPI.UNDEFINED, comm.rank)
        mine = []
        if sub != MPI.COMM_NULL:
            mine = [_compare(sub, numel, seed) for numel in numels]
            sub.Free()
        gathered = comm.comm.gather(mine if comm.rank < n else None, root=0)
        if comm.rank == 0:
            rows += [dict(row, rank=r) for r, part in enumerate(gathered) if part for row in part]
    return rows


def _timed_call(comm, call):
    """Seconds from the last rank entering ``call`` to the last rank leaving it, on every rank.

    Ranks on one machine share the monotonic clock. Timing from the last entry leaves out the
    wait of a rank that left the barrier early, which is not the call's cost.
    """
    comm.comm.Barrier()
    stamps = np.array([time.perf_counter(), 0.0])
    call()
    stamps[1] = time.perf_counter()
    comm.comm.Allreduce(comm.MPI.IN_PLACE, stamps, op=comm.MPI.MAX)
    return float(stamps[1] - stamps[0])


def time_collectives(comm, numels, repeats, calls_per_sample=5, warmup=2, dtype=np.float32):
    """Per size and kind, ``repeats`` samples of seconds per call for ``"mpi"`` and ``"ring"``; rank 0 only.

    A sample is the median of ``calls_per_sample`` calls in a row, each timed on its own: on a
    machine shared with other jobs a single call is now and then preempted for a whole
    scheduler slice (milliseconds), and the inner median drops those calls. The buffers hold
    zeros, so repeated sums stay finite and cost the same every call. The two algorithms take
    turns sample by sample, in the order A B B A, so a slow spell of the machine hits both.
    """
    ring = Communicator(comm.comm, algorithm="ring", timeout=comm.timeout)
    algorithms = {"mpi": comm, "ring": ring}
    rows = []
    for numel in numels:
        n = comm.size
        shard = np.zeros(block_size(numel, n), dtype)
        full = np.zeros(shard.size * n, dtype)
        calls = {"all_reduce": lambda c: c.all_reduce(full),
                 "reduce_scatter": lambda c: c.reduce_scatter(full, shard),
                 "all_gather": lambda c: c.all_gather(shard, full)}
        for kind, call in calls.items():
            samples = {name: [] for name in algorithms}
            for rep in range(warmup + repeats):
                for name in (("mpi", "ring") if rep % 2 == 0 else ("ring", "mpi")):
                    one = [_timed_call(comm, lambda: call(algorithms[name])) for _ in range(calls_per_sample)]
                    if rep >= warmup:
                        samples[name].append(float(np.median(one)))
            rows.append({"kind": kind, "numel": full.size, "bytes": full.nbytes,
                         "calls_per_sample": calls_per_sample, "seconds": samples})
    return rows
