# %% [markdown]
# # Lesson 9 — Watching memory: the process, who holds the peak, leaks, several jobs on one device
#
# The ledger knows exactly what tinymem owns. `nvidia-smi` and `top` know something else: what
# the driver or the operating system has given the process. Between the two sit the allocator
# (NumPy's buffers through `malloc`, CuPy's memory pool) and everything that is not a tensor: the
# interpreter, the libraries, the CUDA context. This lesson puts the three views side by side
# with numbers from one run, then answers the questions a real job asks:
#
# 1. **what does the process hold?** `track(monitor=True)` samples the resident memory (RSS,
#    through psutil) or, on a GPU, the process's memory as NVML reports it
#    (`tinymem/memory/sampler.py`, `nvidia.py`); `tinymem monitor -- python train.py` does it
#    for any command and its children;
# 2. **who holds the peak?** every ledger entry is stamped with the module path and the op that
#    made it (`tinymem/memory/attribution.py`): `tracker.top(10)`, `tracker.by_module()`;
# 3. **what leaks?** `find_leaks(step_fn)` runs a few steps, keeps what grows, and follows the
#    references back to the variable that holds it (`tinymem/memory/leaks.py`);
# 4. **what if two jobs share a device?** a simulated device shared by processes through
#    shared memory (`tinymem/memory/shared.py`), and the cures: a per-process fraction, a
#    device queue, one device per job.

# %%
import os
import sys

import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import cli, memory, planner
from tinymem.experiments import watching as experiment
from tinymem.measure.records import meta, read_records

QUICK = os.environ.get("TINYMEM_QUICK") == "1"
from course import FIGURES, OUT, check, predict, reveal  # OUT: where figures go (lessons/out/, git-ignored)
MiB = 2**20
tm.manual_seed(0)

# %% [markdown]
# ## 1. Three layers, one run
#
# The figure family `watching` trains an MLP with Adam for a few steps inside
# `memory.track(monitor=0.001)`. A thread samples, every millisecond, the process's RSS and
# tracemalloc's count of traced bytes, while the ledger records every event.

# %%
records = {"layers": experiment._layers(QUICK, "cpu"), "meta": meta("cpu", QUICK)}
layers = records["layers"]
print("wrote", experiment._plot_layers(records, OUT))
ledger, alloc, proc = layers["ledger_growth"], layers["allocator_growth"], layers["process_growth"]
print(f"ledger     peak growth {ledger / MiB:7.2f} MiB  (on top of {layers['ledger_start'] / MiB:.2f} MiB "
      "of weights live on entry)")
print(f"allocator  peak growth {alloc / MiB:7.2f} MiB  ({alloc / ledger - 1:+.0%} over the ledger)")
print(f"process    peak growth {proc / MiB:7.2f} MiB  ({proc / ledger - 1:+.0%} over the ledger), "
      f"on top of {layers['process_start'] / MiB:.0f} MiB held before the window")
last = [s for s in layers["samples"] if s["t"] >= layers["step_starts"][-1]]
last_ledger = max(s["ledger"] for s in last) - last[0]["ledger"]
last_process = layers["process_last_step_growth"]
print(f"in the last step the ledger rises by {last_ledger / MiB:.2f} MiB, the process by {last_process / MiB:+.2f} MiB")
if QUICK:  # a step of a few MiB: the allocator's own choices are as large as the effect
    print("quick mode: these steps are too small for the comparison to mean anything; the committed full run:")
    if os.path.exists(os.path.join(FIGURES, "data", "watching.json")):
        kept = next(c for c in read_records(FIGURES, "watching")["claims"] if c["name"] == "process_keeps_freed_blocks")
        check(f"at full size, RSS grows in the last step by under a tenth of the ledger's growth ({kept['value']:.4f})",
              kept["value"] < 0.1)
else:
    check(f"in the last step RSS grows by under a tenth of what the ledger does ({last_process / last_ledger:.3f})",
          last_process < 0.1 * last_ledger)

# %% [markdown]
# Read the gaps from the top down.
#
# - **Allocator above the ledger.** The ledger counts arrays that outlive the op that made
#   them; inside an op NumPy makes temporaries (`x @ w.T` before `+= b`, the pieces of a
#   softmax) that live for a few lines, and Python makes objects (Tensors, graph nodes, lists).
#   tracemalloc sees all of it: the difference printed above, a few percent to a few tens of
#   percent of the step.
# - **Process above everything, from the start.** Before the first array, the process already
#   held the interpreter, NumPy, its BLAS and everything imported: the number printed as "held
#   before the window". On a GPU the same role is played by the CUDA context, a few hundred MiB
#   that `nvidia-smi` shows before your first tensor exists.
# - **The process does not come down.** In the first step RSS climbs with the ledger; in the
#   last one it barely moves although the ledger rises as much again (the two numbers printed
#   above; at full size tens of MiB, in quick mode a few). glibc's `malloc` serves a block of
#   128 KiB or more with an `mmap` of its own and gives it back to the system when it is freed,
#   but after such a free it raises that threshold to the freed block's size (up to 32 MiB): from
#   the second step on, the same blocks come from its heap, and a freed heap block stays with
#   the process for the next `malloc`. So `top` shows a high-water mark, not what is live. CuPy's
#   pool does the same on a GPU (its `held` bytes stay above its `used` bytes), which is why
#   `nvidia-smi` shows more than `torch.cuda.memory_allocated()` or the ledger.
#
# The monitor samples the RSS at an interval, as `nvidia-smi` does. Linux also keeps the
# high-water mark of the RSS (`VmHWM`); the monitor resets it at the start and reads it at the end.

# %%
predict("a window sampled only at its start and its end; inside it a 50 MiB array is made, "
        "filled and freed. What growth do the two samples show, and the kernel's high-water mark?")

# %%
with memory.monitor(interval=10.0) as m:  # two samples only: one at the start, one at the end
    spike = np.ones(50 * 2**20 // 8)
    del spike
sampled = m.sampled_peak() - m.baseline
print(f"sampled growth {sampled / MiB:.1f} MiB, with the kernel's high-water mark {m.peak_delta() / MiB:.1f} MiB"
      + ("" if m.hwm is not None else " (this kernel does not expose it)"))
reveal(f"the samples grew {sampled / MiB:.1f} MiB", "the samples miss the spike: the freed 50 MiB went back to "
       "the system", sampled < 5 * MiB)
if m.hwm is not None:
    check(f"the high-water mark catches it ({m.peak_delta() / MiB:.1f} MiB)", m.peak_delta() >= 45 * MiB)

# %% [markdown]
# Sampling misses what is shorter than the interval, exactly as `nvidia-smi` does; the kernel's
# high-water mark does not, so `process_peak()` catches a spike that no sample saw.
#
# Both samples are near zero: 50 MiB is above glibc's largest `mmap` threshold, so the array
# had pages of its own, and `free` gave them back at once. What stays with the process is what
# `malloc` carved out of its heap (the training step's blocks above).

# %% [markdown]
# ## 2. `tinymem monitor -- command`: any job, and its children
#
# `nvidia-smi` lists processes with their memory. `tinymem monitor` runs a command, samples it
# and every process it starts, and prints the same kind of table when it ends, with a CSV of
# every sample and a PNG of the timeline:

# %%
script = ("import subprocess, sys, time, numpy as np; "
          "worker = subprocess.Popen([sys.executable, '-c', "
          "'import numpy as np, time; a = np.ones(6_000_000); time.sleep(0.5)']); "
          "b = np.ones(2_000_000); time.sleep(0.2); worker.wait()")
code = cli.main(["monitor", "--interval", "0.02", "--device", "cpu", "--out", os.path.join(OUT, "lesson09_monitor"),
                 "--", sys.executable, "-c", script])
print("exit code of the command:", code)

# %% [markdown]
# From a shell: `tinymem monitor -- python train.py --epochs 3`. With a GPU and NVML
# (`pip install .[gpu]`), the table gains each process's GPU memory.
#
# ## 3. Who holds the peak
#
# Every array the ledger registers is stamped with two names, kept per thread:
# `Module.__call__` sets the dotted path of the module running (`blocks.1.attn`, as
# `named_modules` spells it) and `Function.apply` the op (`Softmax`). Backward stamps what a
# node makes with the node's module and `Linear.backward`. A tracker keeps the set of live
# entries and the events since its peak, so after the window it rebuilds exactly what was live
# at the peak: `top(n)` lists the largest, `by_module()` sums them per module, and the sums are
# the ledger's peak to the byte.

# %%
work = planner.workload("transformer", "64,32,32,2,2" if QUICK else "96,128,64,4,4")
model = work.build("none")
opt = tm.optim.Adam(model.parameters())
with memory.track() as t:
    work.loss(model, work.batch(8)).backward()
    opt.step()
print(memory.attribution.format_rows(t.top(10, model)))
by_block = t.by_module(model, depth=2)
print({k: f"{v / MiB:.3f} MiB" for k, v in list(by_block.items())[:6]})
print("sum of the modules:", sum(by_block.values()), "B; the ledger's peak:", t.peak(), "B")

# %%
records["modules"] = [experiment._by_module("transformer", "64,32,32,2,2", 8, "cpu", 2),
                      experiment._by_module("unet", "1,4,8,3,32", 4, "cpu", 2)]
print("wrote", experiment._plot_modules(records, OUT))

# %% [markdown]
# Attribution costs a thread-local read per registered array and a thread-local write per
# module call and per op. It can be switched off (`with memory.attribution.enabled(False):`).
# Timed in turns on a Transformer step (a small model is the worst case: there the Python
# overhead per op is most of the step; on a shared machine single rounds are noisy, so read the
# range of the rounds beside the median):

# %%
def report(cost, where):
    print(f"{where}: step with attribution {1e3 * cost['on']:.2f} ms, without {1e3 * cost['off']:.2f} ms: "
          f"x{cost['ratio']:.3f} (median of {cost['rounds']} rounds in turns, from x{cost['ratio_min']:.3f} "
          f"to x{cost['ratio_max']:.3f})")


report(experiment._overhead(True, "cpu"), "now, small")
if os.path.exists(os.path.join(FIGURES, "data", "watching.json")):
    full = read_records(FIGURES, "watching")["overhead"]
    report(full, "the committed figure run, full size")
    check(f"attribution costs under 15% of a full-size step (median of the rounds: x{full['ratio']:.3f})",
          full["ratio"] <= 1.15)

# %% [markdown]
# ## 4. Leaks
#
# A leak keeps an array alive past its step. `find_leaks(step_fn, steps=5)` runs one warm-up
# step (optimizer state is created there, legitimately), then five; what was born in a step
# and is still alive at the end, step after step, has leaked. For each group it walks
# `gc.get_referrers` up from one leaked array to a name. Three classics:

# %%
mlp = tm.models.MLP([32, 64, 64, 10])
sgd = tm.optim.SGD(mlp.parameters(), lr=0.01)
x = tm.tensor(np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32))
y = np.arange(16) % 10


def evaluation_with_total():
    total = 0.0

    def step():
        nonlocal total
        total += F.cross_entropy(mlp(x), y)  # gradients on and no backward: every graph stays
    return step


def training_with_cache():
    cache = {}

    def step():
        sgd.zero_grad()
        hidden = mlp[:2](x)
        F.cross_entropy(mlp[2:](hidden), y).backward()
        sgd.step()
        cache[len(cache)] = hidden  # "for later"
    return step


def evaluation_with_callbacks():
    callbacks = []

    def step():
        logits = mlp(x)
        callbacks.append(lambda: logits.argmax(axis=1))  # the closure holds logits and its graph
    return step


def clean_training():
    log = []

    def step():
        sgd.zero_grad()
        loss = F.cross_entropy(mlp(x), y)
        loss.backward()
        sgd.step()
        log.append(loss.item())  # a float
    return step


for make in (evaluation_with_total, training_with_cache, evaluation_with_callbacks, clean_training):
    found = memory.find_leaks(make(), steps=4)
    print(f"{make.__name__}: " + ("no leak" if not found else "\n  ".join(map(str, found))))

# %% [markdown]
# `memory.live_tensors()` lists every array alive now, with its bytes, bucket, op and module:
# the first thing to print when `find_leaks` names a holder you do not recognise.

# %%
for row in memory.live_tensors()[:5]:
    print(row)

# %% [markdown]
# ## 5. Two jobs, one device
#
# `track(budget=..., shared="gpu0")` in several processes puts them on one simulated device: a
# table in `multiprocessing.shared_memory` holds each process's pid and bytes, and a file lock
# makes check-and-reserve atomic. Two jobs whose peaks fit the device one at a time, but not
# together, in four arrangements:

# %%
records["processes"] = experiment._processes(QUICK)
print("wrote", experiment._plot_processes(records, OUT))
runs = records["processes"]["runs"]
for scenario, jobs in runs.items():
    total = max(j["end"] for j in jobs) - min(j["start"] for j in jobs)
    print(f"{scenario:<10} total {total:5.2f} s: " + ", ".join(
        f"{j['label']} {j['status']} in {j['end'] - j['start']:.2f} s" for j in jobs))
failed = [j for j in runs["no limit"] if j["status"] == "oom"]
check("without a limit a job fails (" + ", ".join(f"job {j['label']} {j['status']}" for j in runs["no limit"]) + ")",
      len(failed) >= 1)
alone = {j["label"]: j["end"] - j["run_start"] for j in runs["queue"]}  # in the queue each job runs alone
slower = {j["label"]: (j["end"] - j["start"]) / alone[j["label"]] for j in runs["fractions"]}
print("with fractions, each job's time against its time alone: "
      + ", ".join(f"job {k} x{v:.2f}" for k, v in slower.items()))
if failed:
    print("\nthe OOM of the job that failed:\n" + failed[0]["message"])

# %% [markdown]
# - **No limit**: a job that reaches its peak while the other's weights, gradients and momentum
#   sit on the device fails there, with the list of the other processes and their bytes, as
#   `nvidia-smi` would show them. Which job fails, or whether both do (each at a moment the other
#   was still there), is a race: run the lesson twice and it may change. (On a real GPU both may
#   also limp along: CuPy's and PyTorch's caching allocators free their caches and retry before
#   they give up.)
# - **Fractions**: `fraction=0.5` (PyTorch: `torch.cuda.set_per_process_memory_fraction`; here
#   `memory.set_per_process_memory_fraction`, which on a GPU caps CuPy's pool) turns the race
#   into a budget each job can plan for. With `fits_half` micro-batches each job fits its half,
#   and both run, but slower than alone (printed above: each job does its step in several
#   smaller matmuls, and the two share the machine's cores, as two jobs share a GPU's).
# - **Queue**: `with memory.device_queue("gpu0"):` is a file lock; the second job waits until
#   the first is done. Nothing fails; the total time is the sum.
# - **One device per job**: `CUDA_VISIBLE_DEVICES=0 python a.py & CUDA_VISIBLE_DEVICES=1 python
#   b.py`; each job asks `memory.device_name()` for its device. The plainest cure when there
#   are devices to spare.
#
# A process that dies (killed, crashed) leaves its row in the table; the next check sees the
# pid gone and reclaims the bytes, as the driver frees a dead process's memory.
#
# ## Pitfalls
#
# - **`top` and `nvidia-smi` show high-water marks.** Blocks `malloc` carved out of its heap (small
#   ones, and large ones once its `mmap` threshold has risen to their size) return to the
#   allocator, not to the system; only blocks of their own `mmap` (above 32 MiB always) go back.
#   CuPy's pool keeps every freed block until `free_all_blocks()`. Only the ledger (or
#   `used_bytes()` of CuPy's pool) shows what is live.
# - **A sampled peak is a lower bound.** Spikes shorter than the interval are missed; use the
#   kernel's high-water mark (`process_peak()` does) or the ledger's exact events.
# - **`total += loss` leaks even after backward**: backward frees the saved arrays, but `total`
#   keeps a graph that grows by a node per step. Log `loss.item()`.
# - **Attribution names the module that ran, not the one that owns the bytes.** A tensor made in
#   `blocks.0` and kept by `blocks.3` is charged to `blocks.0`. Weights and optimizer state are
#   made outside any forward: pass the model to `by_module(model)` to name the weights.
# - **Shared-device accounting is cooperative.** Only processes that open `track(shared=...)`
#   are counted, as only CUDA processes are counted by the driver.
#
# ## Exercises (`lessons/exercises/ex09.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_09`)
#
# 1. `leaked_bytes_per_step(step_fn, steps)`: find the leak. The ledger's growth per step, after
#    a warm-up step, with garbage collected before each reading. The check gives it a clean
#    Adam loop (whose first step creates state), a cache, and a graph that piles up.
# 2. `logged_step(model, opt, x, y, log)`: a training step that logs its loss without keeping
#    anything alive; `find_leaks` must find nothing.
# 3. `activation_bytes_by_module(tracker, depth)`: attribute the peak. The activation bytes at
#    the peak per module, paths cut at `depth`; they must sum to the activation bucket.
# 4. `micro_batches_for(peaks, budget, fraction)`: make two jobs share a device. The fewest
#    micro-batches whose peak fits the process's share; the check runs two real processes,
#    each capped at half the device, with your answer.
# 5. Think: a job's `nvidia-smi` line is 3 GiB above what the ledger says. Name three things
#    that could be in those 3 GiB, and how you would tell them apart.
