# %% [markdown]
# # Lesson 5 — Optimizer state: what each optimizer keeps, and how to keep less
#
# Lesson 0 showed the five buckets. For a large model trained with Adam the biggest of them is
# often not the activations but the **optimizer state**: Adam keeps two float32 numbers for
# every weight (the moving averages of the gradient and of its square), 8 bytes per parameter,
# twice the weights themselves. This lesson counts the state of every optimizer in
# `tinymem/optim/`, then looks at the two ideas that cut it: by a constant factor (8-bit state)
# and by orders of magnitude (factored state) — section 2 prints both on a 7B model:
#
# - **Adafactor** (Shazeer and Stern, 2018) stores the second moment of an m x n matrix as one
#   row vector and one column vector instead of a full matrix (`tinymem/optim/adafactor.py`);
# - **8-bit Adam** (Dettmers et al., 2022) stores both moments as 1-byte codes with one float32
#   scale per block of values (`tinymem/optim/adam8bit.py`, `tinymem/optim/blockwise.py`).
#
# and ends with a caution: comparing optimizers at one learning rate compares tunings, not
# optimizers.

# %%
import math

import numpy as np

import tinymem as tm
import tinymem.functional as F
from tinymem import memory, optim, plots
from tinymem.experiments import optimizers as experiment
from tinymem.measure.records import read_records
from tinymem.optim import blockwise, table
from course import FIGURES, OUT, QUICK, RECORDS, predict, reveal

tm.manual_seed(0)

# %% [markdown]
# ## 1. What each optimizer keeps
#
# | optimizer | state per weight | why |
# | --- | --- | --- |
# | SGD | nothing | the gradient is used and thrown away |
# | SGD + momentum | 1 buffer | a running sum of past gradients |
# | Adagrad | 1 buffer | the sum of all squared gradients so far (the step only shrinks) |
# | RMSprop | 1 (+1 momentum, +1 centered) | a *decaying* average of g², (+ the velocity, + the mean of g) |
# | Adam / AdamW | 2 buffers (+1 amsgrad) | decaying averages of g and g² (+ the running max of the latter) |
# | Lion | 1 buffer | one momentum; the step is its sign |
# | Adafactor | rows + columns | the second moment of a matrix as a rank-1 product |
# | Adam8bit | 2 buffers of 1 byte | Adam's moments, block-wise quantized |
# | GaLore | a projector + Adam on r rows | Adam on a rank-r projection of the gradient |
#
# Every optimizer class carries its formula as `bytes_for(shape, itemsize, group)`, and
# `tinymem.optim.table` turns them into a table. The tests hold it against `state_bytes()` and the
# ledger; here we check it once more on an MLP.

# %%
sizes = [64, 256, 256, 10] if QUICK else [64, 512, 512, 10]
shapes = [p.shape for p in tm.models.MLP(sizes).parameters()]
print(f"MLP {sizes}: {sum(math.prod(s) for s in shapes):,d} parameters")
for row in table.table(shapes):
    print(f"  {row['optimizer']:<28} {row['bytes_per_param']:7.3f} bytes/param")

x_train, y_train, x_test, y_test = tm.data.load_digits()
x, y = tm.tensor(x_train[:128]), tm.tensor(y_train[:128])
for label, (cls, options) in table.CONFIGS.items():
    model = tm.models.MLP(sizes)
    before = memory.live_bytes("optimizer")
    opt = cls(model.parameters(), **options)
    F.cross_entropy(model(x), y).backward()
    opt.step()
    ledger = memory.live_bytes("optimizer") - before
    assert ledger == opt.state_bytes() == table.expected_state_bytes(opt), label
    del opt, model

# %% [markdown]
# ## 2. A 7-billion-parameter model, worked out
#
# A LLaMA-7B-shaped Transformer: 32 layers of four 4096 x 4096 attention matrices and three
# 4096 x 11008 MLP matrices, two 32000 x 4096 embeddings, and small norm vectors. In float32
# the weights and the gradients each take 4 bytes per parameter. The state on top, and the
# whole of weights + gradients + state against one 40 GB GPU:

# %%
GPU = 40e9
predict(f"which optimizer of the table makes this 7B model's weights, gradients and state fit one "
        f"{GPU / 1e9:.0f} GB GPU in float32?")
d, ff, vocab, layers = 4096, 11008, 32000, 32
llama = ([(d, d)] * 4 + [(ff, d), (ff, d), (d, ff)] + [(d,)] * 2) * layers + [(vocab, d)] * 2 + [(d,)]
n_llama = sum(math.prod(s) for s in llama)
weights_and_grads = 2 * 4 * n_llama
print(f"{n_llama / 1e9:.2f} B parameters; weights {4 * n_llama / 1e9:.1f} GB and gradients "
      f"{4 * n_llama / 1e9:.1f} GB in float32")
rows = {row["optimizer"]: row["state_bytes"] for row in table.table(llama)}
for name, state in rows.items():
    total = weights_and_grads + state
    print(f"  {name:<28} {state / 1e9:8.2f} GB of state ({state / rows['Adam']:7.2g}x Adam's), "
          f"{total / 1e9:6.1f} GB in all: {'fits' if total <= GPU else 'does not fit'} {GPU / 1e9:.0f} GB")
reveal(f"the weights and gradients alone take {weights_and_grads / 1e9:.1f} GB",
       f"no optimizer makes it fit one {GPU / 1e9:.0f} GB GPU in float32: the weights and gradients alone are over it",
       weights_and_grads > GPU and all(weights_and_grads + state > GPU for state in rows.values()))

# %% [markdown]
# What the state choice decides is how far from fitting it is — Adafactor's
# factored state is a rounding error next to the weights, 8-bit Adam a quarter of Adam's — and
# that is what the other techniques (half precision, offload, partitioning) then build on. This
# is the arithmetic behind ZeRO (lesson 7): mixed-precision Adam keeps 16 bytes per parameter,
# half weights and half gradients plus fp32 masters and Adam's two moments.
#
# ## 3. Adafactor's factorisation
#
# For a matrix gradient G, Adam keeps V = EMA(G²), m x n numbers. Adafactor keeps only the
# averages of G² along the rows and along the columns, m + n numbers, and rebuilds V from their
# outer product, normalised (exercise 2 rebuilds it exactly). When G² is a rank-1 matrix (each
# row a multiple of the others) this is exact; for real gradients it is the closest rank-1 fit
# in I-divergence. Let us compare the *shape* of the two on one layer of a real run: on a log
# scale the normalisation is a constant, so the outer product alone says how alike they are.

# %%
tm.manual_seed(0)
model = tm.models.MLP(sizes)
adam = optim.Adam(model.parameters(), lr=1e-3)
factored = optim.Adafactor(model.parameters(), lr=0.0)  # lr 0: it only watches the gradients
loader = tm.data.DataLoader((x_train, y_train), batch_size=128, seed=0)
for step, (xb, yb) in zip(range(5 if QUICK else 50), loader):
    F.cross_entropy(model(xb), yb).backward()
    factored.step()
    adam.step()
    adam.zero_grad()
weight = model[2].weight
state = factored.state[weight]
outer = state["row_var"] @ state["col_var"]
# Adam's v has its bias, Adafactor's beta2_t has none: compare shapes, not scales
v_adam = adam.state[weight]["exp_avg_sq"]
corr = np.corrcoef(np.log(v_adam.ravel() + 1e-30), np.log(outer.ravel() + 1e-30))[0, 1]
print(f"layer {weight.shape}: Adam keeps {v_adam.nbytes:,d} B, Adafactor "
      f"{state['row_var'].nbytes + state['col_var'].nbytes:,d} B; log-correlation of the two V: {corr:.2f}")

# %% [markdown]
# The two estimates agree in their large-scale structure (which rows and columns see large
# gradients) and differ per element: Adafactor gives up per-weight adaptivity inside a matrix.
# PyTorch's version, which tinymem follows, also drops the first moment (beta1 = 0) and scales
# every step by the parameter's own RMS (a *relative* step size), so its `lr` is not Adam's.
#
# ## 4. Block-wise 8-bit quantization, one block at a time
#
# 8-bit Adam cuts each moment into blocks of 2048 values. A block keeps one float32 number that
# sets its scale, and each value keeps one byte: a code that points into a table of 256 values,
# the *map* (exercise 3 writes the encoder). The **dynamic map** spends its codes on a sign, a
# decimal exponent and a fraction, so it represents 1e-7 as well as 0.9; the **linear map**
# spaces its codes evenly. Below, one block of Adam's second moment from the run above,
# quantized both ways.

# %%
block = tm.backend.to_numpy(v_adam.ravel()[:2048]).astype(np.float32)  # to host memory, for matplotlib
fig, axes = plots.new_figure(ncols=2, width=5.5)
for kind in ("dynamic", "linear"):
    qmap = blockwise.MAPS[kind](signed=False)
    codes, absmax = blockwise.quantize(block, qmap, 2048)
    back = blockwise.dequantize(codes, absmax, qmap, 2048)
    zeroed = np.mean((back == 0) & (block > 0))
    rel = np.median(np.abs(back - block) / np.maximum(block, 1e-30))
    print(f"{kind:>8} map: median relative error {rel:.3f}, {zeroed:.0%} of the block rounds to 0")
    axes[0].loglog(block, np.maximum(back, 1e-12), ".", ms=2, label=f"{kind} map")
    axes[1].plot(qmap, ".", ms=2, label=f"{kind} map")
axes[0].plot([block.min(), block.max()], [block.min(), block.max()], "k-", lw=0.5)
axes[0].set(xlabel="Adam's v (one block of 2048)", ylabel="after 8-bit round trip (0 drawn at 1e-12)",
            title="One block, two maps")
axes[1].set(xlabel="code", ylabel="map value (x / absmax)", yscale="log", title="The 256 values of each map")
axes[0].legend(fontsize=7)
print("wrote", plots.save(fig, RECORDS, OUT, "lesson05_one_block.png"))

# %% [markdown]
# The linear map gives every value the same *absolute* error, half a step of absmax / 255, so
# the small entries of a block lose most of their digits and the smallest become zero (the
# printout counts them; the longer the run, the more decades v spans). For Adam a zero is
# fatal, not just imprecise: the step m / (sqrt(v) + eps) divides by it. The dynamic map keeps
# a similar *relative* error at every scale. Note also the order of operations in
# `adam8bit.py`: dequantize, update in float32, take the step with the float32 moments, *then*
# quantize what is carried to the next step. Below, 8-bit Adam against 32-bit Adam on the same
# gradients (the test `tests/optim/test_blockwise.py` does it on a 1024 x 1024 parameter,
# where the linear map's drift turns into blow-ups).

# %%
tm.manual_seed(0)
rng = np.random.default_rng(0)
n = 128 if QUICK else 512
start = rng.standard_normal((n, n)).astype(np.float32)
runs = {"Adam": optim.Adam, "Adam8bit dynamic": lambda p, lr: optim.Adam8bit(p, lr=lr),
        "Adam8bit linear": lambda p, lr: optim.Adam8bit(p, lr=lr, qmap="linear")}
params = {k: tm.nn.Parameter(start.copy()) for k in runs}
opts = {k: make([params[k]], lr=1e-3) for k, make in runs.items()}
for _ in range(30 if QUICK else 100):
    g = (0.1 * rng.standard_normal((n, n)) + 0.01 * start).astype(np.float32)
    for k in runs:
        params[k].grad = g.copy()
        opts[k].step()
moved = np.linalg.norm(params["Adam"].numpy() - start)
for k in ("Adam8bit dynamic", "Adam8bit linear"):
    err = np.linalg.norm(params[k].numpy() - params["Adam"].numpy()) / moved
    print(f"{k}: {opts[k].state_bytes() / opts['Adam'].state_bytes():.3f}x Adam's state, "
          f"distance from Adam's weights = {err:.3f} of the distance Adam moved")
formula = table.bytes_per_param("Adam8bit", (n, n)) * n * n
print(f"one {n} x {n} parameter: Adam8bit keeps {opts['Adam8bit dynamic'].state_bytes():,d} B; the per-tensor "
      f"formula (codes + one scale per block) gives {formula:,.0f} B ({formula / opts['Adam'].state_bytes():.4f}x "
      f"Adam); the difference, {opts['Adam8bit dynamic'].state_bytes() - formula:,.0f} B, is the maps "
      f"({optim.Adam8bit.MAP_BYTES:,d} B: for m and for v a 256-value codebook and a 128 KiB table "
      f"that finds a value's code in one lookup instead of a search), kept once per optimizer")
if opts["Adam8bit dynamic"].state_bytes() > opts["Adam"].state_bytes() / 4:
    print(f"at {n} x {n} those fixed maps are a large share of the state: they are why 8-bit Adam keeps "
          f"more than a quarter of Adam's bytes here; on large tensors they vanish in the codes")

# %% [markdown]
# ## 5. The learning-rate caution
#
# Each optimizer has its own scale of learning rate: Lion's steps are ±lr per weight;
# Adafactor's lr is a relative step; plain SGD's step is the gradient itself, small where Adam
# normalises it. Run everything at Adam's 1e-3 and "Adam wins" says nothing. `tinymem figures
# --only optimizers` sweeps a grid per optimizer and keeps the best held-out loss; these are the
# rates its committed run tuned:

# %%
sweep = read_records(FIGURES, "optimizers")
tuned = {label: entry["lr"] for label, entry in sweep["tuned"].items()}
for label, lr in tuned.items():
    print(f"  {label:<16} tuned lr {lr:<8g} ({lr / tuned['Adam']:g}x Adam's)")

# %% [markdown]
# Here, each of three optimizers trained once at Adam's tuned rate and once at its own. The
# rates were tuned for the sweep's model and number of epochs (its config is printed); the
# model here is smaller and trains for less, and the best rate moves with the budget — so read
# the two columns against each other rather than trusting either rate blindly.

# %%
cfg = {"sizes": [64, 64, 10] if QUICK else [64, 256, 256, 10], "batch": 128,
       "epochs": 1 if QUICK else 4}
arrays = (x_train, y_train, x_test, y_test)
print(f"the sweep: {sweep['config']}; here: {cfg}")
for label in ("SGD", "Lion", "Adam"):
    grid = sorted({tuned["Adam"], tuned[label]})
    losses = {lr: experiment.train_digits(label, lr, cfg, arrays)["final_heldout"] for lr in grid}
    print(f"{label:<5} " + "  ".join(f"lr {lr:g}: held-out loss {v:.3f}" for lr, v in losses.items()))
    if len(losses) == 2:
        verdict = "beats" if losses[tuned[label]] < losses[tuned["Adam"]] else "loses to"
        print(f"      here {label}'s sweep-tuned rate {verdict} Adam's rate")

# %% [markdown]
# Read the verdicts plainly. Where a sweep-tuned rate loses to Adam's here (the lines above say
# which), the rate did not carry over from the sweep's larger model and
# longer run to this one: tuning is only fair on the budget you will train with. That is the
# caution itself, not a flaw of the optimizer. The full figures (`figures/optim_training.png`,
# `optim_pareto.png`) show every optimizer at the rate tuned for *their* budget, and loss against
# state bytes.
#
# ## Pitfalls
#
# - **Adagrad's sum only grows**: its steps shrink forever; fine for sparse features, slow for
#   long dense runs.
# - **Adafactor's first steps**: beta2_t = 1 - t^-0.8 is 0 at t = 1, so the first step uses
#   one gradient's own square: large relative steps, capped by `d` (update clipping).
# - **8-bit state needs the dynamic map and block-wise scales**: one outlier only spoils its
#   own block; with one scale per tensor it would flatten everything else to zero.
# - **Small tensors stay 32-bit** (under 4096 elements): tiny in bytes, sensitive in training.
#   On a small model they push 8-bit Adam's bytes per parameter up (the table of section 1);
#   on one large parameter what is left above the formula is the maps (section 4).
# - **8-bit Adam here works chunk by chunk**: 131,072 elements at a time are dequantized, updated
#   and quantized again, so its workspace is 24 bytes per element of one chunk (3 MiB) however
#   large the parameter; bitsandbytes gets the same by fusing the three in one GPU kernel.
# - **State is per parameter, not per model**: the 7B arithmetic above is what decides whether
#   a model trains at all, which is why ZeRO partitions the state (lesson 7).
#
# ## Exercises (`lessons/exercises/ex05.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_05`)
#
# 1. `state_bytes_for(optimizer, shape)`: the bytes of state for one float32 parameter of
#    `shape` under "sgd", "sgd_momentum", "adam", "adafactor" or "adam8bit" (block 2048,
#    tensors under 4096 elements in float32; the maps are the optimizer's, not the tensor's).
# 2. `adafactor_second_moment(grads, eps1)`: run Adafactor's factored average over a list of
#    gradients of one matrix and rebuild the second moment it uses after the last one.
# 3. `quantize_block(x, qmap)`: the uint8 codes and the scale of one block of 8-bit state.
# 4. `lion_step(p, m, g, lr, betas, weight_decay)`: one Lion update; return the new p and m.
# 5. Think: Adafactor's state on a 4096 x 4096 matrix is a tiny fraction of Adam's (printed
#    below). Why does it still need 4 bytes per element for a bias vector? What would a
#    "factored" state for a vector be, and why would it be useless?

# %%
print(f"Adafactor / Adam state on a 4096 x 4096 matrix: "
      f"{table.bytes_per_param('Adafactor', (4096, 4096)) / table.bytes_per_param('Adam', (4096, 4096)):.4%}")
