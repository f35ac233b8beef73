# %% [markdown]
# # Lesson 7 — Partitioning: data parallel, ZeRO, pipelines, and the ring that moves the bytes
#
# Every earlier lesson shrank a bucket *on one device*. When the model's state alone does not
# fit, the last resort is more devices — and the question becomes how to split the state so
# that each device holds only its share, and what that costs in communication.
#
# tinymem runs real processes, one per rank, launched by `mpiexec` (MPICH, from the `dist`
# extra), talking through `mpi4py`. The source, one concept per file, is in
# `tinymem/distributed/`: `ring.py` (the ring collectives, built from point-to-point steps),
# `comm.py` (the communicator that runs them and counts every byte), `data_parallel.py`,
# `zero.py`, `pipeline.py`, `calculator.py`. Here the ranks are processes sharing this
# machine's cores (counted below): the *bytes* are exact, the *times* are not a cluster's.

# %%
import json
import os
import pathlib
import textwrap

import numpy as np

from tinymem.distributed import calculator, launch, ring
from tinymem.experiments import partition
from tinymem.measure import claims
from tinymem.measure.records import meta

from course import OUT, QUICK, check, predict, reveal  # OUT: lessons/out/ (git-ignored) by default
REPO = pathlib.Path(partition.__file__).resolve().parents[2]
HAVE_MPI = launch.mpi_available()
print(f"{os.cpu_count()} CPU cores; mpi4py and mpiexec available: {HAVE_MPI}")

# %% [markdown]
# ## Where the 16 bytes per parameter go
#
# Mixed-precision Adam (the ZeRO paper's setting) keeps per parameter: a 2-byte fp16 weight, a
# 2-byte fp16 gradient, and K = 12 bytes of optimizer state (an fp32 master copy, momentum and
# variance). Data parallel replicates all 16 on every device. ZeRO (Rajbhandari et al., 2020)
# removes the replication one bucket at a time, partitioning it over the devices instead: stage 1
# the optimizer state, stage 2 the gradients as well, stage 3 the weights as well. Writing the
# bytes per device of each stage is exercise 1; the paper's example is the check:

# %%
predict("7.5 billion parameters on 64 GPUs: which stage first brings the model states per GPU under "
        "a third of data parallel's, and which under 2 GB?")
paper = {row["strategy"]: row for row in calculator.paper_table(7.5e9, 64)}
print(calculator.format_table(paper.values()))
dp_gb = paper["dp"]["gb"]
first_third = next(r["label"] for r in paper.values() if r["gb"] < dp_gb / 3)
under_2 = next(r["label"] for r in paper.values() if r["gb"] < 2)
reveal(f"{first_third} is the first under a third of {dp_gb:.0f} GB; {under_2} the first under 2 GB",
       "each stage leaves less per GPU than the one before, and the optimizer state is the largest cut",
       all(a["gb"] > b["gb"] for a, b in zip(list(paper.values()), list(paper.values())[1:]))
       and paper["dp"]["gb"] - paper["zero1"]["gb"] == max(a["gb"] - b["gb"] for a, b in
                                                          zip(list(paper.values()), list(paper.values())[1:])))

# %% [markdown]
# tinymem trains in float32: 4-byte weights, 4-byte gradients and K = 8 (Adam's m and v) —
# 16 bytes per parameter again, split 4 + 4 + 8 instead of 2 + 2 + 12. The ranks below measure
# what each stage leaves on each rank.
#
# ## The ring: how N ranks add up their gradients
#
# Data parallel ends each step with an **all-reduce**: every rank has a gradient buffer of n
# bytes and must end with the sum over all ranks. The ring algorithm does it with no rank ever
# talking to more than its two neighbours:
#
# 1. Cut the buffer into N blocks (pad it with zeros so that N divides it).
# 2. **Reduce-scatter**, N-1 steps: at each step every rank sends one block to its right
#    neighbour and adds the block arriving from its left into its own copy. A partial sum
#    travels once around the ring, growing by one rank's share per hop, and lands complete on
#    one rank: after N-1 steps each rank owns one fully summed block.
# 3. **All-gather**, N-1 steps: the finished blocks travel around the ring once more, copied,
#    not added, until every rank has all of them.
#
# Each step every rank sends one block of n/N bytes, so in 2(N-1) steps it sends 2(N-1)/N·n
# bytes, whatever N: the ring is bandwidth-optimal. `tinymem/distributed/ring.py` is one rank's
# side of it; `ring.simulate` runs N ranks as threads in this process. Here it is on 3 ranks
# whose numbers are symbols (rank a holds a0 a1 a2, ...), so that the sums can be read:

# %%
class Symbol:
    """A number known only by the inputs summed into it; prints as a0+b0+c0."""

    def __init__(self, names):
        self.names = frozenset(names)

    def __add__(self, other):
        return Symbol(self.names | other.names)

    def __repr__(self):
        return "+".join(sorted(self.names))


def traced_all_reduce(world_size):
    """Run tinymem's ring all-reduce on symbols; returns each rank's blocks before every step and at the end."""
    states = [[] for _ in range(world_size)]

    def body(rank, exchange):
        blocks = np.array([[Symbol([f"{'abcdefgh'[rank]}{b}"])] for b in range(world_size)], dtype=object)

        def traced(send, recv):
            states[rank].append([repr(x) for x in blocks[:, 0]])
            exchange(send, recv)
        ring.all_reduce(blocks.reshape(-1), rank, world_size, traced)
        states[rank].append([repr(x) for x in blocks[:, 0]])

    ring.simulate(world_size, body)
    return states


N_TRACE = 3
trace = traced_all_reduce(N_TRACE)
width = max(len(" | ".join(s)) for rank in trace for s in rank) + 2
print("step" + " " * 15 + "".join(f"rank {r} ({'abc'[r]})".ljust(width) for r in range(N_TRACE)))
for step in range(len(trace[0])):
    phase = "start" if step == 0 else ("reduce-scatter" if step < N_TRACE else "all-gather")
    print(f"{step:>2} {phase:<15}" + "".join(" | ".join(trace[r][step]).ljust(width) for r in range(N_TRACE)))

# %% [markdown]
# Read a column: after step 2 each rank holds one block summed over all three ranks, and the
# all-gather then copies those around. The order of the additions is fixed by the ring (block
# b is summed starting after its owner), so every rank ends with the same bits; MPI's own
# algorithm may add in another order, and agrees to rounding (the tests hold both).
# Exercise 2 is to build this ring yourself, for all ranks at once.
#
# ## Measure it on real ranks
#
# `tinymem.experiments.partition` launches `mpiexec -n 2` and `-n 4` on a worker that trains an
# MLP with each strategy, its collectives run by the ring of `ring.py` over `MPI.Sendrecv`. So
# the bytes each rank sent are *measured* — the payloads handed to MPI, added up by the
# communicator — and set against the formula: one all-reduce of the gradients for data
# parallel; for ZeRO-1 and 2 a reduce-scatter of the gradients (each rank needs the sum of its
# own shard only) and an all-gather of the updated parameters; for ZeRO-3 the parameters
# gathered before each layer's forward *and again* before its backward. Without MPI the lesson
# reads the committed records of the figures instead.

# %%
def partition_records():
    """This run's records (with MPI), or the committed ones; and a line saying which."""
    if HAVE_MPI:
        records = partition.run(quick=QUICK)
        records["meta"] = meta("cpu", QUICK)
        records["claims"] = claims.evaluate(partition.CLAIMS, records, QUICK)
        for path in partition.plot(records, OUT):
            print("wrote", path)
        return records, "measured by this run"
    path = REPO / "figures" / "data" / "partition.json"
    with open(path) as f:
        records = json.load(f)
    info = records["meta"]
    return records, f"no MPI here: the committed records, {path.name}, {info['machine']}, {info['date']}"


records, source = partition_records()
print(source)
for ranks, result in records["runs"].items():
    print(f"\n{ranks} ranks, MLP {result['sizes']} ({result['params']:,} parameters), collectives: "
          f"{result['algorithm']}; per rank, largest rank relative to data parallel:")
    print(f"  {'':<6} {'optimizer':>9} {'model states':>12} {'sent/step':>10} {'formula':>9} {'measured/formula':>16}")
    for name, s in partition.summary(result).items():
        print(f"  {name:<6} {s['optimizer_vs_dp']:9.3f} {s['model_states_vs_dp']:12.3f} "
              f"{s['sent_per_rank'] / 2**10:8.1f} KiB {s['sent_per_rank'] / s['traffic_vs_textbook'] / 2**10:5.1f} KiB "
              f"{s['traffic_vs_textbook']:16.4f}")

# %% [markdown]
# The formula column is 2(N-1)/N·4P per step (3(N-1)/N·4P for ZeRO-3; for the pipelines the
# activations and their gradients crossing each stage boundary). The measured bytes differ
# from it only by what the formula leaves out: the padding of a layer whose size N does not
# divide, and the pipeline's 64-byte shape headers. Applied call by call with the padding, the
# ring formula equals the measurement byte for byte, on every rank (the first claim below). So
# ZeRO-1 and 2 cost no more traffic than data parallel, and ZeRO-3 1.5 times as much.
#
# In the memory columns: ZeRO-1 shrinks the optimizer state, ZeRO-2 the gradients as well, ZeRO-3
# the parameters as well — by a share that depends on N (compare the 2-rank and 4-rank tables).
# The activations do not move: every rank still runs its B/N samples through the whole model.
#
# The claims that the figure, its caption and this lesson make, checked on these records:

# %%
print(claims.format_rows(records["claims"]))

# %% [markdown]
# ## The ring against MPI's own collectives
#
# MPI's built-in `Allreduce` (MPICH here) picks its own algorithm by buffer size and rank count.
# Thakur, Rabenseifner and Gropp (2005), *Optimization of Collective Communication Operations in
# MPICH*, describe the classic choice: recursive doubling for small buffers (log2(N) rounds of
# messages), and for large ones Rabenseifner's reduce-scatter then all-gather by recursive
# halving and doubling, the ring's bytes in fewer rounds. Newer MPICH versions choose from tuning
# tables, so which one ran here is not recorded. The records time both side by side on 2 ranks
# (one core each), in turns, many calls each; median and interquartile range (IQR), and the
# ring's time over MPI's by lower quartiles (the fast quarter of the turns, which other jobs on a
# shared machine cannot slow down):

# %%
timing = records.get("collectives")
if timing:
    print(f"{timing['world_size']} ranks, {timing['repeats']} samples each (a sample: the median of "
          f"{timing['rows'][0]['calls_per_sample']} calls); 'apart': one of the two was the slower in "
          f">= {claims.SLOWER_SHARE:.0%} of the paired turns")
    for row in timing["rows"]:
        if row["kind"] != "all_reduce":
            continue
        mpi, mine = row["stats"]["mpi"], row["stats"]["ring"]
        print(f"  all-reduce {row['bytes']:>10,} B   MPI {1e6 * mpi['median']:9.1f} us "
              f"(IQR {1e6 * (mpi['q3'] - mpi['q1']):7.1f})   ring {1e6 * mine['median']:9.1f} us "
              f"(IQR {1e6 * (mine['q3'] - mine['q1']):7.1f})   ring/MPI {row['q1_ratio']:5.2f}"
              f"{'   apart' if row['separated'] else ''}")

# %% [markdown]
# Small buffers: the ring's 2(N-1) steps, each a `Sendrecv` called from Python, cost more than
# MPI's single call. Large buffers: the Python steps are lost in copying the bytes. The all-gather,
# which only copies, is level with MPI's; the ring's all-reduce is even faster than MPICH's, whose
# own sum of the two halves costs more than NumPy's here (the all-gather shows that the copying
# is not what differs). With
# more ranks than cores (this machine's count is printed at the top), the timings would measure
# the operating system's scheduler, not the algorithm, so only 2 ranks are timed here.
#
# ## Your own training script on N ranks
#
# A training script is the single-process one with a strategy around the model. Every rank runs
# the same file; `install_excepthook` makes a rank that raises stop them all. Pass
# `Communicator(algorithm="ring")` to run its collectives through the ring and read
# `comm.traffic` afterwards.

# %%
script = textwrap.dedent("""
    import numpy as np
    import tinymem as tm
    import tinymem.functional as F
    from tinymem.distributed import Communicator, ZeRO, launch

    launch.install_excepthook()
    comm = Communicator(algorithm="ring")
    tm.manual_seed(0)
    x, y, _, _ = tm.data.load_digits()
    x, y = x[:256], y[:256]
    model = tm.models.MLP([64, 128, 128, 10])
    zero = ZeRO(model, lambda p: tm.optim.Adam(p, lr=1e-2), comm, stage=3)
    for step in range(STEPS):
        loss = zero.step(x, y, F.cross_entropy)       # each rank: its 256/N samples
    mean = comm.comm.allreduce(loss) / comm.size      # mpi4py's own call, for printing
    ring = sum(row["sent"] for kind, row in comm.traffic.snapshot().items()
               if kind in ("reduce_scatter", "all_gather"))
    if comm.rank == 0:
        print(f"rank 0 of {comm.size}: loss {mean:.3f} after STEPS steps; "
              f"optimizer state {zero.optimizer.state_bytes():,} B on this rank; "
              f"{ring:,} B sent by its ring collectives")
""").replace("STEPS", "5" if QUICK else "50")
os.makedirs(OUT, exist_ok=True)
path = os.path.join(OUT, "zero3_digits.py")
with open(path, "w") as f:
    f.write(script)
if HAVE_MPI:
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print(launch.run([path], 2, timeout=300, env=env).stdout)

# %% [markdown]
# ## The pipeline and its bubble
#
# A pipeline cuts the *layers* instead: rank s holds stage s. A batch is cut into M
# micro-batches; micro-batch m flows forward through the stages and its gradient flows back.
# Under GPipe (Huang et al., 2019) every stage runs all M forwards, then all M backwards. The
# first stage must wait for the last one to start its backwards, and the last stage waited at
# the start for the first forwards to reach it: for part of the step, stages idle — the
# *bubble*. Exercises 3 and 4: draw GPipe's timeline slot by slot, and count its idle fraction
# as a formula in S and M. More micro-batches shrink it.
#
# GPipe keeps the activations of all M micro-batches alive on each stage until their
# backwards. 1F1B (Narayanan et al., 2019) starts each stage's backwards as soon as the
# gradients arrive and then alternates one forward and one backward, so fewer micro-batches are
# in flight on each stage (how many is exercise 5), for the same bubble. The activation peak
# of each stage, measured:

# %%
four = records["runs"]["4"]
peaks = {(r["strategy"], r["rank"]): r["max_by_bucket"]["activation"] for r in four["records"]}
print(f"4 stages, {four['micro_batches']} micro-batches of {four['batch'] // four['micro_batches']} "
      f"({source.split(':')[0]})")
ratios = [peaks[("1f1b", stage)] / peaks[("gpipe", stage)] for stage in range(4)]
print(f"  all stages: GPipe {sum(peaks[('gpipe', s)] for s in range(4)):,} B, "
      f"1F1B {sum(peaks[('1f1b', s)] for s in range(4)):,} B of activations at their peaks")
check("from stage 1 on, the later the stage, the smaller 1F1B's share of GPipe's activation peak",
      all(a > b for a, b in zip(ratios[1:], ratios[2:])))

# %% [markdown]
# The later the stage, the fewer micro-batches 1F1B holds there (how many is exercise 5, so the
# stages are not printed one by one). Stage 0 is the exception in these numbers: what it saves for backward is its input, and each micro-batch's input is a
# slice of the one batch array, which the ledger counts once, whole, however many slices are
# alive.
#
# ## Pitfalls
#
# - The batch must split evenly over the ranks (and into micro-batches); otherwise the mean of
#   the local means is not the batch mean and the result silently differs.
# - Replicas must start equal: the strategies broadcast rank 0's parameters when built.
# - A collective waits for everybody: a rank that raises (or dies) must take the job down. The
#   communicator's watchdog (`TINYMEM_MPI_TIMEOUT`) and `install_excepthook` do; without them
#   an MPI job hangs forever.
# - ZeRO shards per layer: its transient peak includes one layer's full parameters and
#   gradients, so one giant layer (an embedding) limits the savings.
# - Equality with single-process training holds to rounding: the collectives sum in another
#   order. In float32 Adam amplifies those last bits on near-zero gradients; the tests compare
#   in float64.
# - The ring's latency grows with N (2(N-1) messages one after another): for small buffers on
#   many ranks a tree is faster, which is why MPI switches algorithms by size.
#
# ## Exercises (`lessons/exercises/ex07.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_07`)
#
# The checks switch tinymem's own versions off while your code runs: build, do not import.
#
# 1. `zero_bytes_per_device(params, world_size, stage)`: model-state bytes per device of
#    mixed-precision Adam, stage 0 (data parallel) to 3.
# 2. `ring_all_reduce(inputs, exchange)`: the ring all-reduce of N buffers, every rank in
#    lockstep, talking only through `exchange`; pad, reduce-scatter, all-gather. The check
#    counts your messages and their bytes.
# 3. `gpipe_timeline(stages, micro_batches)`: GPipe's schedule as a grid of slots.
# 4. `bubble_fraction(stages, micro_batches)`: the idle fraction of your timeline, as a formula.
# 5. `one_f_one_b(stage, stages, micro_batches)`: the 1F1B order of ("F", m) and ("B", m).
# 6. Think: ZeRO-3 gathers each layer twice. When would you keep the last layer's parameters
#    between its forward and its backward, and what does that save?
