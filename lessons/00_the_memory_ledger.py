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
import os

import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory

QUICK = os.environ.get("TINYMEM_QUICK") == "1"
OUT = os.environ.get("TINYMEM_LESSON_OUT", ".")
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
print(memory.format_table(memory.LEDGER.by_bucket(), "live now (between steps)"))

# %% [markdown]
# Between steps, activations are zero: backward frees each node's saved arrays as soon as it
# has used them. Gradients stay until `zero_grad()`; optimizer state stays for good.
#
# ## One step under the microscope
#
# `memory.track()` opens a window: peaks, a timeline of every allocation and free, and the
# allocator's own measurement.

# %%
opt.zero_grad()
x, y = next(iter(loader))
with memory.track() as t:
    memory.mark("forward")
    loss = F.cross_entropy(model(x), y)
    activations_at_end_of_forward = memory.live_bytes("activation")
    loss.backward()
    opt.step()
print(t.table())
print(f"peak growth: ledger {t.peak_delta():,} B, tracemalloc {t.measured_peak():,} B")

# %%
from tinymem import plots  # noqa: E402

fig, ax = plots.new_figure(width=7.5)
plots.stacked_timeline(ax, t.timeline(), f"One Adam step, MLP {sizes}, batch {batch}")
path = plots.save(fig, {"meta": {"machine": "this machine", "quick": QUICK}}, OUT, "lesson00_timeline.png")
print("wrote", path)

# %% [markdown]
# ## The buckets by formula
#
# For an MLP with layer sizes $n_0, \dots, n_L$ in float32 (4 bytes):
#
# - parameters: $4 \sum_i (n_i n_{i+1} + n_{i+1})$ bytes; gradients: the same;
# - Adam: two arrays per parameter, $8 \sum_i (n_i n_{i+1} + n_{i+1})$;
# - activations for a batch $B$: each Linear saves its input, each ReLU its output — and the
#   ReLU's output *is* the next Linear's input, so it is counted once:
#   $4B(n_0 + n_1 + \dots + n_{L-1})$, plus the loss's probabilities $4 B n_L$ and the
#   integer targets $8B$.

# %%
params = sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))
predicted = {"parameter": 4 * params, "gradient": 4 * params, "optimizer": 8 * params,
             "activation": 4 * batch * sum(sizes[:-1]) + 4 * batch * sizes[-1] + 8 * batch}
measured = {"parameter": sum(p.nbytes for p in model.parameters()),
            "gradient": sum(p.grad.nbytes for p in model.parameters()),
            "optimizer": opt.state_bytes(), "activation": activations_at_end_of_forward}
for bucket in predicted:
    print(f"{bucket:<10} formula {predicted[bucket]:>9,d}  ledger {measured[bucket]:>9,d}")
    assert predicted[bucket] == measured[bucket]

# %% [markdown]
# ## An out-of-memory error, simulated
#
# With a budget, the ledger raises `OutOfMemoryError` as a GPU would, and names what filled it.

# %%
try:
    with memory.track(budget=memory.live_bytes() + predicted["activation"] // 2):
        F.cross_entropy(model(x), y).backward()
except tm.OutOfMemoryError as err:
    print(str(err).splitlines()[0])

# %% [markdown]
# ## Exercises (`lessons/exercises/ex00.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_00`)
#
# 1. `mlp_parameter_bytes(sizes, bytes_per_value=4)`: the parameter bytes of `MLP(sizes)`.
# 2. `adam_step_bytes(sizes, batch)`: the bytes of the parameter, gradient and optimizer buckets
#    after one Adam step, as a dict.
# 3. `mlp_activation_bytes(sizes, batch)`: the activation bytes at the end of the forward pass
#    with a cross-entropy loss (check it against the ledger!).
# 4. Think: why does the ledger's peak happen at the start of backward and not at its end?
#    What changes if you call `zero_grad()` *after* `step()` instead of before the forward?
