# %% [markdown]
# # Lesson 7 — Partitioning: data parallel, ZeRO and pipelines over MPI
#
# Every earlier lesson shrank a bucket *on one device*. When the model's state alone does not
# fit, the last resort is more devices — and the question becomes how to split the state so
# that each device holds only its share, and what that costs in communication.
#
# tinymem runs real processes, one per rank, launched by `mpiexec` (MPICH, from the `dist`
# extra), talking through `mpi4py`. The source, one concept per file, is in
# `tinymem/distributed/`: `comm.py` (collectives that count their bytes), `data_parallel.py`,
# `zero.py`, `pipeline.py`, `calculator.py`. On this 2-core machine the ranks are CPU
# processes sharing the cores; the *bytes* are exact, the *times* are not what a cluster gives.

# %%
import os
import pathlib
import textwrap

from tinymem.distributed import calculator, launch
from tinymem.distributed.pipeline import bubble_fraction
from tinymem.experiments import partition

QUICK = os.environ.get("TINYMEM_QUICK") == "1"
OUT = os.environ.get("TINYMEM_LESSON_OUT", ".")
HAVE_MPI = launch.mpi_available()
print("mpi4py and mpiexec available:", HAVE_MPI)

# %% [markdown]
# ## Where the 16 bytes per parameter go
#
# Mixed-precision Adam (the ZeRO paper's setting) keeps per parameter: a 2-byte fp16 weight, a
# 2-byte fp16 gradient, and K = 12 bytes of optimizer state (an fp32 master copy, momentum and
# variance). Data parallel replicates all 16 on every device. ZeRO removes the replication
# one bucket at a time:
#
# | stage | sharded | bytes per device |
# | --- | --- | --- |
# | DP | nothing | 16P |
# | ZeRO-1 | optimizer state | 4P + 12P/N |
# | ZeRO-2 | + gradients | 2P + 14P/N |
# | ZeRO-3 | + parameters | 16P/N |
#
# The paper's example, 7.5 billion parameters on 64 GPUs:

# %%
table = calculator.paper_table(7.5e9, 64)
print(calculator.format_table(table))

# %% [markdown]
# tinymem trains in float32: 4-byte weights, 4-byte gradients and K = 8 (Adam's m and v) —
# 16 bytes per parameter again, split 4 + 4 + 8 instead of 2 + 2 + 12:

# %%
params, n = 216_586, 4  # the MLP [64, 256, 256, 256, 256, 10] of the figure, on 4 ranks
for strategy in calculator.STRATEGIES:
    row = calculator.model_state_bytes(params, n, strategy, param_bytes=4, grad_bytes=4, k=8)
    print(f"{calculator.LABELS[strategy]:<20} {row['total'] / 2**10:8.1f} KiB "
          f"(= {row['total'] / (16 * params):.3f} of data parallel)")

# %% [markdown]
# ## What each stage costs in traffic
#
# A ring all-reduce of n bytes on N ranks is a reduce-scatter followed by an all-gather, and
# each rank sends (N-1)/N·n in each half: 2(N-1)/N·n in all (`comm.ring_bytes`).
#
# - **Data parallel**: one all-reduce of the gradients: 2(N-1)/N·bP per step.
# - **ZeRO-1 and 2**: reduce-scatter the gradients (each rank only needs the sum of its own
#   shard), step the optimizer on the shard, all-gather the updated parameters: the same
#   2(N-1)/N·bP. Stages 1 and 2 are *free* in traffic.
# - **ZeRO-3**: the parameters are not kept, so they are all-gathered before each layer's
#   forward *and again* before its backward: 3(N-1)/N·bP, 1.5 times data parallel.
#
# ## Measure it on real ranks
#
# `tinymem.experiments.partition` launches `mpiexec -n 2` and `-n 4` on a worker that trains
# the same MLP with each strategy and records every rank's ledger and bytes sent.

# %%
if HAVE_MPI:
    records = partition.run(quick=QUICK)
    records["meta"] = {"machine": "this machine", "quick": QUICK}
    for path in partition.plot(records, OUT):
        print("wrote", path)
    for ranks, result in records["runs"].items():
        print(f"\n{ranks} ranks (largest rank, relative to data parallel):")
        for name, s in partition.summary(result).items():
            print(f"  {name:<6} optimizer {s['optimizer_vs_dp']:.3f}  model states "
                  f"{s['model_states_vs_dp']:.3f}  traffic/formula {s['traffic_vs_formula']:.3f}  "
                  f"activation peak {s['activation_peak']:,} B")
else:
    print("install the dist extra (pip install .[dist]) to run the ranks")

# %% [markdown]
# Read the figure from left to right: ZeRO-1 removes most of the green (optimizer), ZeRO-2 the
# orange (gradients), ZeRO-3 the blue (parameters), until each rank holds a quarter of data
# parallel's model states on 4 ranks. The activations do not move: every rank still runs its
# B/N samples through the whole model.
#
# ## Your own training script on N ranks
#
# A training script is the single-process one with a strategy around the model. Every rank runs
# the same file; `install_excepthook` makes a rank that raises stop them all.

# %%
script = textwrap.dedent("""
    import numpy as np
    import tinymem as tm
    import tinymem.functional as F
    from tinymem.distributed import Communicator, ZeRO, launch

    launch.install_excepthook()
    comm = Communicator()
    tm.manual_seed(0)
    x, y, _, _ = tm.data.load_digits()
    x, y = x[:256], y[:256]
    model = tm.models.MLP([64, 128, 128, 10])
    zero = ZeRO(model, lambda p: tm.optim.Adam(p, lr=1e-2), comm, stage=3)
    for step in range(STEPS):
        loss = zero.step(x, y, F.cross_entropy)       # each rank: its 256/N samples
    mean = comm.comm.allreduce(loss) / comm.size      # mpi4py's own call, for printing
    if comm.rank == 0:
        print(f"rank 0 of {comm.size}: loss {mean:.3f} after STEPS steps; "
              f"optimizer state {zero.optimizer.state_bytes():,} B on this rank")
""").replace("STEPS", "5" if QUICK else "50")
path = os.path.join(OUT, "zero3_digits.py")
with open(path, "w") as f:
    f.write(script)
if HAVE_MPI:
    repo = str(pathlib.Path(partition.__file__).resolve().parents[2])  # so the ranks import tinymem
    env = dict(os.environ, PYTHONPATH=repo + os.pathsep + os.environ.get("PYTHONPATH", ""))
    print(launch.run([path], 2, timeout=300, env=env).stdout)

# %% [markdown]
# ## The pipeline and its bubble
#
# A pipeline cuts the *layers* instead: rank s holds stage s. A batch is cut into M
# micro-batches; micro-batch m flows forward through the stages and its gradient flows back.
# Under GPipe every stage runs all M forwards, then all M backwards; the first stage waits
# S-1 slots for the last one to start, and as many at the end. Idle fraction:
# (S-1)/(M+S-1).

# %%
for stages in (2, 4, 8):
    print(f"S={stages}: " + "  ".join(f"M={m}: {bubble_fraction(stages, m):.2f}" for m in (1, 4, 8, 32)))

# %% [markdown]
# GPipe keeps all M micro-batches' activations alive on each stage. 1F1B starts backwards as
# soon as the last stage can: stage s holds at most S-s micro-batches, so with M = 8 the first
# of 4 stages keeps 4 micro-batches instead of 8 — compare the activation peaks printed above.
# The bubble is the same.
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
#
# ## Exercises (`lessons/exercises/ex07.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_07`)
#
# 1. `zero_bytes_per_device(params, world_size, stage)`: the table above for stage 0 (data
#    parallel) to 3, mixed-precision Adam.
# 2. `ring_all_reduce_bytes(nbytes, world_size)`: bytes one rank sends in a ring all-reduce.
# 3. `shard_range(numel, world_size, rank)`: `(start, stop, padded)` of rank's shard of a flat
#    buffer padded to a multiple of the world size.
# 4. `bubble_fraction(stages, micro_batches)`.
# 5. `one_f_one_b(stage, stages, micro_batches)`: the 1F1B order of ("F", m) and ("B", m).
# 6. Think: ZeRO-3 gathers each layer twice. When would you keep the last layer's parameters
#    between its forward and its backward, and what does that save?
