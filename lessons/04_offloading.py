# %% [markdown]
# # Lesson 4 — Offloading: trade device memory for traffic
#
# A GPU's memory is small and fast; the host's RAM is large and slower to reach (PCIe); a disk
# is huge and slower still. **Offload** keeps training state in the big, slow places and brings
# it to the device just before it is needed. It attacks every bucket:
#
# | what | where it waits | when it is needed | tinymem |
# | --- | --- | --- | --- |
# | activations | host or disk | once, in backward (reverse order) | `save_on_host()`, `save_on_disk()` |
# | optimizer state | host or disk | once per step, by the update | `offload_optimizer(opt, "host")` |
# | weights | host or disk | twice per step (forward, backward) | `stream_layers(model, "host")` |
#
# PyTorch ships the first as `torch.autograd.graph.save_on_cpu`; DeepSpeed's ZeRO-Offload
# (Ren et al., 2021) does the second — its abstract reports models of over 13 billion parameters
# trained on a single GPU — and ZeRO-Infinity and FlexGen do the third, with NVMe and prefetching.
#
# Sources to keep open, all in `tinymem/techniques/offload/`: `activations.py` (the activation
# hooks), `store.py` (host copies, files), `prefetch.py` (the prefetch thread), `stream.py`,
# `optimizer.py`, `bandwidth.py`; and `tinymem/experiments/offload.py`.
#
# **An honest warning.** On a machine without a GPU, tinymem's "device" is the ledger's
# budgeted place and "host" is *the same RAM*. So `save_on_host()` on the CPU is **accounting
# plus a real copy, not a physical saving**: the ledger moves the bytes from `device` to `host`
# and the copy really happens (it costs real time), but the process uses as much RAM as
# before — more, during the copy. Disk offload is real on every machine. On CuPy, host offload is
# real: pinned host memory and asynchronous copies on a separate CUDA stream.

# %%
import contextlib
import tempfile
import time

import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory
from tinymem.experiments import offload as exp
from tinymem.techniques import offload
from course import OUT, QUICK, RECORDS, check, predict, reveal

tm.manual_seed(0)

# %% [markdown]
# ## 1. The memory hierarchy, measured on your machine
#
# Offload's cost is bytes divided by bandwidth, so first measure the bandwidths, with the very
# functions offload uses. `page_cache=False` flushes each file and evicts it from the OS page
# cache, so the read really goes to the disk (with the cache on, a file you just wrote is
# usually read back from RAM).

# %%
size = (1 << 20) if QUICK else (4 << 20)
for page_cache in (True, False):
    bw = offload.measure_bandwidths(size, 8 * size, repeats=2, page_cache=page_cache)
    print(f"page cache {'on ' if page_cache else 'off'}: memcpy {bw['memcpy'] / 1e9:5.1f} GB/s, "
          f"disk write {bw['disk_write'] / 1e6:6.0f} MB/s, disk read {bw['disk_read'] / 1e6:6.0f} MB/s")

# %% [markdown]
# On a GPU add PCIe, the link between host and device. Its ceiling follows from the standard
# (PCIe 4.0: 16 GT/s per lane, 128b/130b encoding), computed below for 16 lanes; pinned copies
# reach less, and `measure_bandwidths(..., device="cuda")` reports the real `h2d` and `d2h`.
# The GPU's own memory is about a hundred times faster: NVIDIA's data sheets give 2,039 GB/s
# for an A100 80GB SXM and 3.35 TB/s for an H100 SXM.

# %%
pcie4_x16 = 16e9 * 16 * (128 / 130) / 8
print(f"PCIe 4.0 x16 ceiling: {pcie4_x16 / 1e9:.1f} GB/s each way; an A100's memory is "
      f"{2039e9 / pcie4_x16:.0f}x that")

# %% [markdown]
#
# ## 2. What to offload first
#
# Measure the buckets of one training step with the ledger and ask, for each: how big is it,
# how often is it needed, and can its transfer hide behind compute?

# %%
sizes = [256, 512, 512, 512, 10]
batch = 1024 if QUICK else 4096
model = tm.models.MLP(sizes)
rng = np.random.default_rng(0)
x = tm.tensor(rng.standard_normal((batch, sizes[0])).astype(np.float32))
y = tm.tensor(rng.integers(0, sizes[-1], batch))
adam = tm.optim.Adam(model.parameters())
loss = F.cross_entropy(model(x), y)
activations = memory.live_bytes("activation")
loss.backward()
adam.step()
buckets = {"parameters": (memory.live_bytes("parameter"), "2x per step (forward, backward)"),
           "gradients": (memory.live_bytes("gradient"), "1x (the update)"),
           "Adam state": (memory.live_bytes("optimizer"), "1x (the update), stays between steps"),
           "activations": (activations, "1x (backward), grows with the batch")}
for name, (nbytes, uses) in buckets.items():
    print(f"{name:<12} {nbytes / 2**20:7.2f} MiB   needed {uses}")
print(f"at batch {batch} the activations are {activations / memory.live_bytes('optimizer'):.2f}x Adam's state")
del adam, loss
model.zero_grad(set_to_none=True)

# %% [markdown]
# The usual order: **optimizer state first** — with Adam it is twice the weights, the largest
# bucket that stays on the device *between* steps, it is needed only once per step, and the
# update can run where the state is (ZeRO-Offload's insight). At a large batch the activations
# outgrow it (the ratio above), but they are gone between steps and shrink with the batch or
# with checkpointing; the state does not. **Activations next** (needed once, in a predictable
# order, so they can be prefetched), **weights last** (needed twice per step, so they move
# twice).
#
# ## 3. Activation offload with `saved_tensors_hooks`
#
# Every tensor saved for backward goes through `pack` at save time and `unpack` when backward
# needs it. `save_on_host` packs into a host copy; `save_on_disk` into a file in a private
# temporary folder, each file removed once backward has used it — so backward may run inside
# the block or after it, as with PyTorch's `save_on_cpu`.
# Parameters that an op saves (a Linear's weight) are left alone: they are resident anyway.

# %%
def one_step(ctx):
    model.zero_grad(set_to_none=True)
    with memory.track() as t, ctx:
        memory.mark("forward")
        loss = F.cross_entropy(model(x), y)
        by_place = {p: memory.live_bytes("activation", p) for p in memory.PLACES}
        memory.mark("backward")
        loss.backward()
    return t, by_place


MiB = 2**20
predict(f"save_on_disk sends every saved activation off the device ({activations / MiB:.2f} MiB of them in "
        "the table above). Does the device peak drop by all the activations that left, or by less, and why?")
runs = {}
for name, ctx in [("no offload", None), ("save_on_host", offload.save_on_host(prefetch=0)),
                  ("save_on_disk", offload.save_on_disk(prefetch=0))]:
    t, by_place = one_step(ctx or contextlib.nullcontext())
    split = t.peak_by_bucket()
    runs[name] = t, by_place
    print(f"{name:<13} activations after forward (MiB) {({p: round(v / MiB, 2) for p, v in by_place.items()})}\n"
          f"{'':<13} device peak growth {t.peak_delta() / MiB:5.2f} MiB (ledger), allocator "
          f"{t.measured_peak() / MiB:5.2f} MiB; at the peak the device holds "
          f"activation {split['activation'] / MiB:.2f}, workspace {split['workspace'] / MiB:.2f}, "
          f"gradient {split['gradient'] / MiB:.2f} MiB")
(plain, plain_saved), (disk, _) = runs["no offload"], runs["save_on_disk"]
left = plain_saved["device"]
reveal(f"{left / MiB:.2f} MiB of activations left the device; its peak growth fell by "
       f"{(plain.peak_delta() - disk.peak_delta()) / MiB:.2f} MiB",
       "the device peak drops by less than the activations that left",
       plain.peak_delta() - disk.peak_delta() < left)
check("without offload the peak sits on top of nearly every saved activation (over 90% of them)",
      plain.peak_by_bucket()["activation"] > 0.9 * left)
check("with save_on_disk no saved activation is on the device at the peak",
      disk.peak_by_bucket()["activation"] == 0)
working_set = disk.peak_delta()
size_word = ("larger than" if working_set > left else "nearly as large as" if working_set > 0.8 * left
             else "smaller than")
print(f"backward's working set with save_on_disk: {working_set / MiB:.2f} MiB, {size_word} "
      f"the {left / MiB:.2f} MiB of activations")

# %% [markdown]
# Read the allocator column: with `save_on_host` on the CPU the ledger's device peak drops, but
# the allocator's (tracemalloc) does not — the host copy lives in the same RAM. That is the
# honest accounting the warning above promised. With `save_on_disk` both drop: the bytes left
# the process.
#
# Why does the device peak drop by less than the activations that left? Because the peak
# *moves*. Without offload it falls early in backward, on top of the saved activations.
# With offload the end of forward is light, and the peak falls inside backward instead, where
# the device holds backward's own working set: the saved input of one layer brought back (from
# disk; `save_on_host` on NumPy reads its host copy where it is, hence its lower peak), the
# gradient flowing in, the gradient flowing out (each a batch x width array, workspace) and the
# weight gradients made so far. In this shallow network that working set is of the size of
# all the activations (the last line above compares them); it does not grow with depth, so the
# deeper the network, the larger the share that offload removes.
#
# ## 4. The overlap argument, and prefetch
#
# Without overlap a step pays its compute plus the time to write every offloaded byte out and
# read it back in, at the bandwidths measured above (exercise 2 makes this a formula). Saved
# tensors come back in **reverse order of packing**, so while backward computes layer *k*,
# a background thread can already read layer *k-1*'s activations (and, in forward, write
# layer *k*'s file while layer *k+1* computes). If the transfers are shorter than the compute
# they hide behind, offload becomes nearly free. `torch.autograd.graph.save_on_cpu` does no
# prefetch: it copies back on demand. We measure rather than assume: `stats()` reports how
# long the main thread was blocked on I/O.

# %%
directory = tempfile.gettempdir()
cfg = exp.config(quick=True)
m2, x2, y2 = exp.make_problem(cfg, "cpu")
opt2 = tm.optim.SGD(m2.parameters(), lr=1e-3)
for mode in ("disk", "disk+prefetch"):
    best, blocked = float("inf"), None
    for _ in range(2 if QUICK else 4):
        start = time.perf_counter()
        ctx = exp.train_step(m2, opt2, x2, y2, exp.activation_context(mode, directory))
        best = min(best, time.perf_counter() - start)
        s = ctx.stats()
        blocked = s["wait_s"] + s["write_wait_s"]
    print(f"{mode:<14} step {best * 1e3:7.1f} ms, main thread blocked on I/O {blocked * 1e3:6.1f} ms, "
          f"prefetch hits {s['prefetch_hits']}/{s['prefetch_hits'] + s['prefetch_misses']}")

# %% [markdown]
# ## 5. Optimizer state on the host (ZeRO-Offload) and layer streaming
#
# `offload_optimizer(opt, "host")` wraps *any* tinymem optimizer through its state storage: the
# gradient goes down, the optimizer's own `update_parameter` runs on a host master copy and host state,
# and the updated weight goes back up. `stream_layers(model, "host")` keeps the parameters on
# the host and brings layers to the device as they are needed, in forward and again in backward
# (a pack hook saves a *reference* to the weight instead of its device copy); `prefetch` says
# how far ahead it fetches (how many weights that leaves on the device: exercise 3).
#
# ## 6. Fit a budget
#
# The same model, the same device budget: plain training runs out of memory; streamed weights,
# host optimizer state and disk activations fit, and give the very same numbers.

# %%
def train(offloaded, budget=None, steps=2):
    tm.manual_seed(0)
    model = tm.models.MLP(sizes)
    opt = tm.optim.Adam(model.parameters(), lr=1e-3)
    net = offload.stream_layers(model, "host") if offloaded else model
    opt = offload.offload_optimizer(opt, "host") if offloaded else opt
    try:
        with memory.track(budget=budget, measure=False) as t:
            for _ in range(steps):
                opt.zero_grad()
                with offload.save_on_disk() if offloaded else contextlib.nullcontext():
                    loss = F.cross_entropy(net(x), y)
                    loss.backward()
                opt.step()
    finally:
        if offloaded:
            net.close()
            opt.close()
    return loss.item(), t.peak(), [p.numpy().copy() for p in model.parameters()]


plain_loss, plain_peak, plain_params = train(False)
_, offloaded_peak, _ = train(True)
budget = (offloaded_peak // 2**16 + 1) * 2**16  # the offloaded peak, rounded up to 64 KiB
print(f"device peak: plain {plain_peak / 2**20:.2f} MiB, offloaded {offloaded_peak / 2**20:.2f} MiB; "
      f"budget {budget / 2**20:.2f} MiB")
try:
    train(False, budget)
except tm.OutOfMemoryError as err:
    print("plain under the budget:", str(err).splitlines()[0])
loss, peak, params_after = train(True, budget)
print(f"offloaded under the budget: loss {loss:.6f} (plain {plain_loss:.6f}), peak {peak / 2**20:.2f} MiB")
assert loss == plain_loss and all(np.array_equal(a, b) for a, b in zip(plain_params, params_after))

# %% [markdown]
# ## 7. The figures
#
# `python -m tinymem figures --only offload` regenerates `figures/offload_timeline.png`
# (device memory over one step: no offload, activation offload, layer streaming) and
# `figures/offload_tradeoff.png` (step time against device peak, measured beside predicted).
# Here the same sweep runs on this machine, now (at quick sizes in quick mode):

# %%
records = exp.run(quick=QUICK)
records["meta"] = RECORDS["meta"]
for path in exp.plot(records, OUT):
    print("wrote", path)
for row in records["modes"]:
    print(f"{row['mode']:<14} {row['q1'] * 1e3:7.1f} ms measured now (lower quartile of the turns), "
          f"{row['predicted_seconds'] * 1e3:7.1f} ms predicted, device peak {row['peak'] / 2**20:5.2f} MiB")

# %% [markdown]
# ## Pitfalls
#
# - **Pinned memory is finite.** Page-locked host memory cannot be swapped out; pin tens of GiB
#   and the whole machine slows down. PyTorch's `save_on_cpu(pin_memory=True)` has the same
#   caveat.
# - **The CPU update can dominate.** An Adam update is a few passes over 16 bytes per
#   parameter; a CPU does that at a few GB/s, a GPU at a few TB/s. ZeRO-Offload overlaps the
#   CPU update with the next step's backward and uses a vectorised CPU Adam; ours does not.
# - **A kept graph keeps its files**: `save_on_disk` removes a file when backward has used it
#   or its graph is freed, so a `loss` kept without `backward()` holds its files on disk.
# - **The page cache lies (kindly).** A file read right after it was written usually comes
#   from RAM. Measure with `page_cache=False` to see the disk.
# - **Prefetch costs memory**: `prefetch=k` keeps up to `k` arrays on the device ahead of use
#   (and `k` arrays waiting for their write in forward). Bigger is not always better.
# - **Small tensors** cost a file each: the per-file cost (open, flush, delete) dominates below
#   a few hundred KiB — that is why `measure_bandwidths` takes the schedule's sizes.
#
# ## Exercises (`lessons/exercises/ex04.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_04`)
#
# 1. `offloaded_files(sizes, batch)`: the bytes of each file `save_on_disk` writes for one
#    forward of `MLP(sizes)` (ReLU) with a cross-entropy loss, in the order written. Careful:
#    which arrays are saved twice, does offload write them twice, and which does it not write?
# 2. `predicted_step_seconds(base_s, bytes_out, bytes_in, write_bw, read_bw, backward_s=None)`:
#    the step time without overlap; with `backward_s` given, the reads hide behind that much
#    backward compute.
# 3. `streaming_parameter_peak(sizes, prefetch)`: the most parameter bytes `stream_layers` holds
#    on the device for `MLP(sizes)` with that prefetch depth.
# 4. `zero_offload_traffic(sizes)`: for ZeRO-Offload with Adam, the bytes that cross the link per
#    step and the bytes the host holds (master weights and state), as a dict.
# 5. Think: when does activation offload beat checkpointing (lesson 1)? Compare the time of
#    moving a layer's activation twice with the time of recomputing it.
