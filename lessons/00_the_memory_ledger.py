# %% [markdown]
# # Lesson 0 — The memory ledger
#
# Training memory has five buckets: **parameters** (the weights), **gradients** (one per
# weight), **optimizer state** (Adam keeps two more arrays per weight), **activations** (what
# the forward pass saves for backward) and **workspace** (everything else: op outputs, the
# gradients flowing backward, temporaries). Every technique in this course attacks one of
# them, so first we learn to *see* them.
#
# tinymem registers every array it creates in a ledger (`tinymem/memory/`), keyed by the
# buffer that owns the memory, and releases it through a weak reference the moment the buffer
# dies. So the ledger follows the real lifetimes of arrays — and we can check it against the
# allocator itself (`tracemalloc` on NumPy, CuPy's memory pool on a GPU).
#
# On the CPU, "device" memory is *simulated*: the ledger's budget behaves like a GPU's memory
# limit so that out-of-memory failures and their cures can be shown on any laptop.

# %%
import tinymem as tm
import tinymem.functional as F
from tinymem import memory, plots
from course import OUT, QUICK, RECORDS, check, predict, reveal

tm.manual_seed(0)

# %% [markdown]
# ## Train a small MLP on the digits and watch the buckets

# %%
x_train, y_train, x_test, y_test = tm.data.load_digits()
sizes = [64, 128, 128, 10]
batch = 64
model = tm.models.MLP(sizes)
opt = tm.optim.Adam(model.parameters(), lr=1e-3)
loader = tm.data.DataLoader((x_train, y_train), batch_size=batch, seed=0, drop_last=True)

for epoch in range(1 if QUICK else 10):
    for x, y in loader:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
with tm.no_grad():
    accuracy = (model(tm.tensor(x_test)).numpy().argmax(1) == y_test).mean()
print(f"final loss {loss.item():.3f}, test accuracy {accuracy:.3f}")
print(memory.format_table(memory.LEDGER.by_bucket(), "live now, between steps (simulated device)"))

# %% [markdown]
# Between steps, activations are zero: backward frees each node's saved arrays as soon as it
# has used them. Gradients stay until `zero_grad()`; optimizer state stays for good.
#
# And the workspace? The ledger can say which arrays are in it. tinymem counts an array from
# the moment a Tensor wraps it until the last reference to its buffer dies — and our script
# still holds some:

# %%
names = {id(x_test): "x_test, the test set (tm.tensor wrapped it to measure the accuracy)",
         id(x.data): "x, the last batch", id(y.data): "y, its targets", id(loss.data): "loss, the last loss"}
listed = 0
for entry in memory.LEDGER.entries.values():
    array = entry.ref()
    if entry.place == "device" and entry.bucket == "workspace" and array is not None:
        listed += entry.nbytes
        print(f"  {entry.nbytes:>9,d} B  {str(array.dtype):<8} {str(array.shape):<10} "
              f"{names.get(id(array), 'another array still referenced')}")
print(f"  {listed:>9,d} B  in all: the workspace bucket holds {memory.live_bytes('workspace'):,d} B")
del entry, array  # the loop's names would keep the last entry's array (any bucket) alive

# %% [markdown]
# ## One step under the microscope
#
# `memory.track()` opens a window: peaks, a timeline of every allocation and free, and the
# allocator's own measurement. `memory.mark` puts a label on the timeline (the optimizer's
# `step()` marks itself).

# %%
opt.zero_grad()
x, y = next(iter(loader))
predict("the activations are largest at the end of forward. In which phase does this Adam step reach "
        "its peak: forward, backward, or the optimizer's update?")
with memory.track() as t:
    # Windows may nest: one per phase tells which of them reached the whole step's peak.
    with memory.track(measure=False, timeline=False) as in_forward:
        memory.mark("forward")
        loss = F.cross_entropy(model(x), y)
        end_of_forward = memory.LEDGER.by_bucket()
    with memory.track(measure=False, timeline=False) as in_backward:
        memory.mark("backward")
        loss.backward()
    opt.step()
events = t.timeline()
phase = ("forward" if in_forward.peak() == t.peak() else "backward" if in_backward.peak() == t.peak()
         else "the optimizer's update")
print(memory.format_table(end_of_forward, "at the end of forward (simulated device)"))
print(memory.format_table(t.peak_by_bucket(), "at the step's peak (simulated device)"))
reveal(f"the peak, {t.peak():,} B, falls in {phase} (forward reached {in_forward.peak():,} B, "
       f"backward {in_backward.peak():,} B)",
       "the peak falls after forward; on the CPU in the update, when every weight has its gradient",
       in_forward.peak() < t.peak() and (tm.get_default_device() != "cpu" or (
           phase == "the optimizer's update"
           and t.peak_by_bucket()["gradient"] == sum(p.nbytes for p in model.parameters()))))

# %% [markdown]
# The activations are largest at the end of forward, yet the step's peak falls later: gradients
# now exist for every weight, and backward and the update make their own temporaries. On the
# CPU Adam's update makes two of each parameter's size (see the formulas in the docstring of
# `tinymem/optim/adam.py`); on a GPU the update is one fused kernel that makes none, and the peak
# moves into backward. Finding the phase from the timeline alone, event by event, is exercise 3.
#
# **The ledger against the allocator.** Both report the growth above the moment the window
# opened:

# %%
print(f"peak growth: ledger {t.peak_delta():,} B, tracemalloc {t.measured_peak():,} B "
      f"({t.measured_peak() / t.peak_delta() - 1:+.1%})")
opt.zero_grad()
with memory.track(timeline=False) as quiet:
    F.cross_entropy(model(x), y).backward()
    opt.step()
print(f"the same step without a timeline: ledger {quiet.peak_delta():,} B, tracemalloc "
      f"{quiet.measured_peak():,} B ({quiet.measured_peak() / quiet.peak_delta() - 1:+.1%})")
print(f"the timeline above holds {len(events)} events")

# %% [markdown]
# tracemalloc counts every allocation of the process, not only NumPy's buffers: the timeline
# the window records (one Python record per event), the Tensors and graph nodes of the step,
# the ledger's own record per live array. Switch the timeline off and most of the gap goes;
# what remains is the Python objects. The ledger is the account of the arrays; the allocator
# is what a GPU would actually run out of.

# %%
fig, ax = plots.new_figure(width=7.5)
plots.stacked_timeline(ax, events, f"One Adam step, MLP {sizes}, batch {batch} (simulated device)")
print("wrote", plots.save(fig, RECORDS, OUT, "lesson00_timeline.png"))

# %% [markdown]
# ## The buckets, by formula: your turn
#
# Every bucket of this MLP can be predicted with pencil and paper before anything runs —
# exercises 1 and 2 write the formulas. The tables above are one batch size; the parameters do
# not depend on it, the saved activations do. Work out how, then:

# %%
def saved_at_end_of_forward(b):
    """Activation bytes live at the end of a forward of the first ``b`` training examples."""
    # Copies: a slice is a view, and the ledger counts the buffer a view keeps alive (all of x_train).
    first_b = F.cross_entropy(model(tm.tensor(x_train[:b].copy())), tm.tensor(y_train[:b].copy()))
    saved = memory.live_bytes("activation")
    del first_b  # its graph, and every saved array with it, goes here
    return saved


parameters = sum(p.nbytes for p in model.parameters())
predict(f"MLP {sizes}, float32, {parameters:,d} B of parameters: from which batch size on do the activations "
        "saved at the end of forward hold more bytes than the parameters?")
crossing = next(b for b in range(1, len(x_train) + 1) if saved_at_end_of_forward(b) > parameters)
below, above = saved_at_end_of_forward(crossing - 1), saved_at_end_of_forward(crossing)
reveal(f"parameters {parameters:,d} B; activations {below:,d} B at batch {crossing - 1}, {above:,d} B at batch "
       f"{crossing}", f"the activations grow by the same {saved_at_end_of_forward(1):,d} B per example, the "
       f"parameters stay: they pass them at batch {crossing}",
       below <= parameters < above and all(saved_at_end_of_forward(b) == b * saved_at_end_of_forward(1)
                                           for b in (crossing - 1, crossing, batch)))

# %% [markdown]
# ## An out-of-memory error, simulated
#
# With a budget, the ledger raises `OutOfMemoryError` as a GPU would, and names what filled it.

# %%
try:
    with memory.track(budget=memory.live_bytes() + end_of_forward["activation"] // 2):
        F.cross_entropy(model(x), y).backward()
except tm.OutOfMemoryError as err:
    print(err)
    check("the error names the buckets that filled it", all(b in str(err) for b in memory.BUCKETS))

# %% [markdown]
# ## The step in a browser, and in PyTorch's memory viewer
#
# A picture you can point at answers "what is this block?" better than a table. The window `t`
# of the step above kept every allocation and free, so it can be written out twice:
#
# - a page of our own, one HTML file that needs no network: the buckets stacked over the step,
#   the phase marks and the peak; hover over a band to name the array under the pointer (shape,
#   dtype, bytes, bucket, module, op, the line of this lesson that made it), click to list
#   everything live at that moment, largest first;
# - PyTorch's memory snapshot, the file `torch.cuda.memory._dump_snapshot()` writes: open
#   https://pytorch.org/memory_viz and drag the file in. Its "Active Memory Timeline" is the same
#   step as PyTorch users see theirs; the bucket of each block is the first line of its stack.
#
# Open both, find the peak, and hover over its largest block: which bucket, and which op, made it?

# %%
import os
import pickle

page_path = os.path.join(OUT, "lesson00_step.html")
snapshot_path = os.path.join(OUT, "lesson00_step.pickle")
t.export_page(page_path, f"one Adam step, MLP {sizes}, batch {batch} (simulated device)")
t.export_snapshot(snapshot_path)
print(f"open {page_path} in a browser;\ndrag {snapshot_path} into https://pytorch.org/memory_viz")
with open(snapshot_path, "rb") as f:
    blocks = [b for b in pickle.load(f)["segments"][0]["blocks"] if b["state"] == "active_allocated"]
check("the snapshot's blocks at the end of the window are the ledger's bytes then, to the byte",
      sum(b["size"] for b in blocks) == sum(events[-1]["live"].values()))

# %% [markdown]
# ## Exercises (`lessons/exercises/ex00.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_00`)
#
# 1. `mlp_parameter_bytes(sizes, bytes_per_value=4)`: the parameter bytes of `MLP(sizes)`.
# 2. `mlp_activation_bytes(sizes, batch)`: the activation bytes at the end of the forward pass
#    with a cross-entropy loss. Which arrays does each layer save, and which of them are the
#    same buffer?
# 3. `replay_peak(start, events)`: replay a tracking window's events yourself and find its peak,
#    the bytes of each bucket at that moment and the phase it falls in. Why is the peak not the
#    sum of each bucket's own maximum (`Tracker.max_by_bucket`)?
# 4. Think: which arrays make the peak of the step above? What would change if you called
#    `zero_grad()` right after `step()` instead of before the forward?
