# %% [markdown]
# # Lesson 1 — Gradient checkpointing
#
# In Lesson 0 the ledger showed that between steps activations are zero, but *during* a step
# every layer keeps what its backward needs (a Linear keeps its input, a ReLU its output) until
# backward reaches it. Lesson 0's small MLP at batch 64 kept fewer bytes of activations than of
# parameters; that changes with size. Parameters grow with width², activations with
# **depth × batch × width** — and the batch is what we want to grow.
#
# Gradient checkpointing trades time for that memory: keep only a few states, throw the rest
# away, and recompute them in backward when they are needed. The source is short:
# `tinymem/techniques/checkpoint/segments.py` (checkpoint, checkpoint_sequential),
# `tinymem/techniques/checkpoint/revolve.py` (the optimal schedule) and `tinymem/techniques/checkpoint/schedule.py`
# (choose a schedule for a byte budget). On the CPU the "device" is simulated by the ledger.

# %%
import inspect
import math
import os

import numpy as np

import tinymem as tm
from tinymem import memory, plots
from tinymem.measure.records import read_records
from tinymem.techniques.checkpoint.schedule import choose_schedule
from tinymem.techniques.checkpoint import checkpoint, checkpoint_sequential, resolve_segments
from tinymem.techniques.checkpoint.revolve import checkpoint_revolve, revolve
from course import FIGURES, OUT, QUICK, RECORDS, check, predict, reveal

# The committed depth figure's network: this lesson measures the very same one.
FIGURE = read_records(FIGURES, "checkpoint")
WIDTH, BATCH, SLOTS = FIGURE["depth"]["width"], FIGURE["depth"]["batch"], FIGURE["config"]["slots"]


def deep_mlp(n, width=WIDTH):
    tm.manual_seed(0)
    return tm.nn.Sequential(*[tm.nn.Sequential(tm.nn.Linear(width, width), tm.nn.ReLU()) for _ in range(n)])


def one_step(model, run, batch=BATCH):
    """Buckets at the peak of one forward + backward with ``run(model, x)``."""
    x = tm.randn(batch, model[0][0].in_features, requires_grad=True)
    with memory.track(measure=False) as t:
        run(model, x).backward(np.ones(x.shape, np.float32))
    return t


# %% [markdown]
# ## When activations dominate
#
# A block Linear(w, w) → ReLU at batch B keeps one B×w state for backward (the ReLU's output,
# which is also the next Linear's input: one buffer, counted once). Its weight is w×w. So
# activations beat parameters as soon as B·(depth + 1) > w·depth, roughly B > w. Below, 32
# blocks of width w at a batch of w/4 and at 4w:

# %%
width = 64 if QUICK else WIDTH
model = deep_mlp(32, width)
ratios = {}
for batch in (width // 4, 4 * width):
    peak = one_step(model, lambda m, x: m(x), batch).max_by_bucket()
    ratios[batch] = peak["activation"] / peak["parameter"]
    print(f"width {width}, batch {batch:>4}: parameters {memory.format_bytes(peak['parameter']):>10}, "
          f"activations {memory.format_bytes(peak['activation']):>10} ({ratios[batch]:.2f}x the parameters)")
check("below a batch of about the width the parameters are larger; above it the activations",
      ratios[width // 4] < 1 < ratios[4 * width])

# %% [markdown]
# ## Cutting n layers into k segments, on paper
#
# Cut n layers into k segments. Keep only each segment's input during forward. In backward,
# recompute one segment at a time with its graph. Few segments: each is long, and the one being
# recomputed holds many states. Many segments: many inputs are kept. The price: every layer
# outside the last segment runs its forward twice — about one extra forward pass, +33% when a
# backward costs two forwards (Chen et al. 2016).

# %%
n_blocks = 36
predict(f"{n_blocks} blocks Linear -> ReLU cut into k segments. Roughly how many states does the "
        "activation peak hold, as a function of k, and which k makes it smallest?")
tiny = deep_mlp(n_blocks, 16)
state = 4 * 4 * 16  # one batch x width float32 array at batch 4, width 16
states = {k: one_step(tiny, lambda m, x, k=k: checkpoint_sequential(m, k, x), 4).max_by_bucket()["activation"] // state
          for k in (1, 2, 3, 4, 6, 9, 12, 18, 36)}
best = min(states, key=states.get)
reveal("activation peak in states, per segment count k: " + ", ".join(f"k={k}: {v}" for k, v in states.items()),
       f"the peak is smallest at k = sqrt(n) = {math.isqrt(n_blocks)}, with about 2·sqrt(n) states instead of n",
       best == math.isqrt(n_blocks) and states[best] <= 2 * math.isqrt(n_blocks) + 1 < n_blocks <= states[1])

# %% [markdown]
# ## The code
#
# The checkpoint node is an ordinary `Function` (`CheckpointFunction` in
# `tinymem/techniques/checkpoint/segments.py`). Its forward runs the segment **without** a graph
# (`no_grad`) and saves only the inputs and the RNG state. Its backward calls `replay`: restore
# the RNG (so dropout draws the same mask), mark the run as a recomputation (so BatchNorm-like
# layers do not update their statistics twice), record the graph from fresh leaves, and run a
# nested backward through it. The parameters are leaves of that graph: their `.grad` fills up
# right there. Exercise 3 asks you to write such a `Function` yourself; read ours after.

# %% [markdown]
# `checkpoint_sequential` has PyTorch's semantics: `segments - 1` checkpointed segments of
# `n // segments` layers, and a last segment (the remainder) that runs normally — its
# activations are needed at once, recomputing them would only cost time.

# %%
print(inspect.getsource(checkpoint_sequential).split('"""')[-1])

# %% [markdown]
# ## Reproducing the depth figure
#
# `python -m tinymem figures --only checkpoint` draws `figures/checkpoint_depth.png` (the
# activation peak against depth) and `figures/checkpoint_frontier.png` (step time against
# memory, where PyTorch's `checkpoint_sequential` is timed on the same network). Here is the
# depth figure's network (width and batch read from its records), measured again by this
# lesson; the ledger is exact, so the numbers must equal the committed ones.

# %%
depths = [8, 16, 32] if QUICK else [8, 16, 32, 64, 128]
schedules = {"none": lambda m, x: m(x),
             "sqrt(n) segments": lambda m, x: checkpoint_sequential(m, "sqrt", x),
             f"revolve, {SLOTS} slots": lambda m, x: checkpoint_revolve(m, SLOTS, x)}
committed = {(r["depth"], r["schedule"]): r["activation_peak"] for r in FIGURE["depth"]["rows"]}
peaks = {name: [] for name in schedules}
for n in depths:
    model = deep_mlp(n)
    for name, run in schedules.items():
        peaks[name].append(one_step(model, run).max_by_bucket()["activation"])
print(f"width {WIDTH}, batch {BATCH}: activation peak, this run / the figure's records")
fig, ax = plots.new_figure()
for name, ys in peaks.items():
    ax.plot(depths, [y / 2**20 for y in ys], marker="o", label=name)
    print(f"{name:>18}: " + "  ".join(f"{memory.format_bytes(y)} / {memory.format_bytes(committed[(n, name)])}"
                                      for n, y in zip(depths, ys)))
    assert all(y == committed[(n, name)] for n, y in zip(depths, ys)), "the ledger no longer matches the figure"
ax.set_xscale("log", base=2)
ax.set_yscale("log")
ax.set_xlabel("depth n (blocks)")
ax.set_ylabel("activation peak (MiB, ledger, simulated device)")
ax.set_title(f"width {WIDTH}, batch {BATCH}", fontsize=9)
ax.legend()
print("wrote", plots.save(fig, RECORDS, OUT, "lesson01_depth.png"))

# %% [markdown]
# ## Revolve: the fewest recomputations for s slots
#
# With s slots (the input takes one), Griewank and Walther's binomial checkpointing reverses l
# steps with the fewest forward recomputations — and that fewest has a closed form, a count of
# binomial coefficients (exercise 2 asks you for it). The schedule advances, keeps a snapshot,
# reverses the far part with one slot fewer, frees the slot, restores, and reverses the near
# part. Here is l = 8, s = 3 as a picture: time goes down, each row is one action.

# %%
schedule = revolve(8, 3)
print(f"{len(schedule)} actions, {schedule.forwards} recomputed layer forwards "
      f"(with 1 slot: {revolve(8, 1).forwards})")
fig, ax = plots.new_figure(width=5, height=6)
colors = {"advance": "#4c72b0", "snapshot": "#55a868", "restore": "#8c8c8c", "free": "#dd8452",
          "backward": "#c44e52"}
for row, action in enumerate(schedule):
    color = colors[action.kind]
    if action.kind == "advance":
        ax.annotate("", (action.end, row), (action.step, row), arrowprops=dict(arrowstyle="->", color=color))
    else:
        ax.scatter([action.step + (0.5 if action.kind == "backward" else 0)], [row], color=color,
                   marker={"snapshot": "s", "restore": "o", "free": "x", "backward": "<"}[action.kind], s=40)
for kind, color in colors.items():
    ax.scatter([], [], color=color, label=kind)
ax.invert_yaxis()
ax.set_xlabel("state index i (x_0 .. x_8)")
ax.set_ylabel("action")
ax.legend(fontsize=7, loc="upper right")
ax.set_title("revolve(8 steps, 3 slots)")
print("wrote", plots.save(fig, RECORDS, OUT, "lesson01_revolve.png"))

# %% [markdown]
# ## Give a budget, not a segment count
#
# `choose_schedule` profiles each layer once (alone, so it never needs the whole network's
# memory), predicts the peak of every segment count and every slot count, and picks the
# cheapest one that fits.

# %%
model = deep_mlp(16)
x = tm.randn(BATCH, WIDTH, requires_grad=True)
plain = one_step(model, lambda m, h: m(h)).max_by_bucket()["activation"]
print(f"plain: {plain:,d} B of activations; sqrt(n) = {resolve_segments('sqrt', 16)} segments")
for fraction in (0.6, 0.35, 0.2):
    plan = choose_schedule(model, x, int(plain * fraction))
    got = one_step(model, lambda m, h: plan(m, h)).max_by_bucket()["activation"]
    print(f"budget {fraction:.0%} of plain: {plan.kind}={plan.count}, {plan.recomputed} recomputed "
          f"forwards, predicted {plan.predicted_peak} B, ledger {got} B")

# %% [markdown]
# ## Selective recomputation: keep the matmuls, recompute the rest
#
# Full recomputation runs a segment's whole forward again. But the time of a forward sits in a
# few ops (matmuls, convolutions) and its saved bytes in many cheap ones (LayerNorm's x-hat, the
# GELU's input, the attention weights, elementwise results). Korthikanti et al. (2022) keep the
# first and recompute the second; PyTorch calls it selective activation checkpointing. In
# tinymem it is the `policy` argument of `checkpoint`: `policy=["linear", "matmul", "conv2d"]`
# (or `Policy(save=...)`, or `Policy(recompute=[...])` to name what is recomputed).
#
# How it works (`tinymem/techniques/checkpoint/selective.py`): the checkpoint's forward runs its
# function through an *op hook* (`tinymem.autograd.op_hook`, a seam of `Function.apply`) that
# stores the outputs of the kept ops; backward recomputes the function through a hook that hands
# each kept op its stored output and calls only its `keep_for_backward` (what its forward saves,
# without the arithmetic). The stored outputs are the values the recomputation would produce,
# so the gradients are bit-identical to the plain run:

# %%
from tinymem.experiments.checkpoint_nets import model_activation_peak, transformer_problem

name, lm, lm_loss = transformer_problem(quick=True)


def lm_grads(strategy):
    lm.zero_grad()
    lm_loss(strategy).backward()
    return [p.grad.numpy().copy() for p in lm.parameters()]


plain_grads = lm_grads("none")
print("selective gradients identical to plain:",
      all(np.array_equal(a, b) for a, b in zip(plain_grads, lm_grads("selective"))))
for strategy in ("none", "full recompute", "selective"):
    print(f"{name}, {strategy:15s}: activation peak {model_activation_peak(lm, lm_loss, strategy):,d} B")

# %% [markdown]
# Each block keeps its input and its four Linear outputs, not its LayerNorms, attention
# weights and GELU input. Backward redoes the norms, the softmax and the GELU, but no
# projection. The right panel of the frontier figure measures it at full size, on the
# Transformer LM and on the U-Net (whose blocks keep their convolutions), beside no
# checkpointing, full recomputation and sqrt(n) segments:

# %%
from tinymem.measure.records import read_records

committed = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(tm.__file__))), "figures")
if os.path.exists(os.path.join(committed, "data", "checkpoint.json")):
    for data in read_records(committed, "checkpoint").get("models", {}).values():
        for r in data["rows"]:
            print(f"{data['model']}: {r['strategy']:17s} activations {r['memory_ratio']:.3f}x, "
                  f"step time {r['time_ratio']:.3f}x of none")

# %% [markdown]
# ![the frontier, with whole models on the right](../figures/checkpoint_frontier.png)
#
# On the left panel, PyTorch's point at k = 64 is `checkpoint_sequential` with one block per
# segment: every block but the last is recomputed (nearly one whole extra forward) and each of
# the 63 checkpoints re-enters the autograd engine with a backward of its own.

# %% [markdown]
# ## Pitfalls
#
# **RNG.** Recomputing dropout with a fresh random state gives a different mask, and silently
# wrong gradients. `preserve_rng_state=True` (the default) restores the state:

# %%
tm.manual_seed(0)
drop_model = tm.nn.Sequential(*[tm.nn.Sequential(tm.nn.Linear(WIDTH, WIDTH), tm.nn.Dropout(0.5)) for _ in range(6)])


def grad_of_input(run):
    x = tm.tensor(np.ones((4, WIDTH), np.float32), requires_grad=True)
    tm.manual_seed(1)
    run(x).sum().backward()
    return x.grad.numpy()


ref = grad_of_input(drop_model)
print("with RNG replay, identical:", np.array_equal(ref, grad_of_input(lambda h: checkpoint_sequential(drop_model, 3, h))))
print("without, identical:", np.array_equal(
    ref, grad_of_input(lambda h: checkpoint_sequential(drop_model, 3, h, preserve_rng_state=False))))

# %% [markdown]
# **Running statistics.** A layer that updates state in forward (BatchNorm's running mean)
# would update it twice. It must check `tinymem.autograd.is_recomputing()`:

# %%
class CountingLayer(tm.nn.Module):
    def __init__(self):
        super().__init__()
        self.updates = 0

    def forward(self, h):
        if not tm.autograd.is_recomputing():
            self.updates += 1
        return h


counter = CountingLayer()
checkpoint(tm.nn.Sequential(tm.nn.Linear(WIDTH, WIDTH), counter), tm.randn(2, WIDTH, requires_grad=True)).sum().backward()
print("forward side effect applied", counter.updates, "time(s)")

# %% [markdown]
# **The last segment** is never checkpointed (PyTorch does the same): `segments=1` means no
# checkpointing at all, and with `segments = n` every layer but the last runs twice.
#
# **Outputs must be Tensors**, and a plain function that closes over parameters while no
# input requires grad gives those parameters no gradient (tinymem warns; pass a Module).
#
# ## Exercises (`lessons/exercises/ex01.py`, check with
# `TINYMEM_EXERCISES=student python -m pytest -m exercise_01`)
#
# 1. `segment_peak_states(n, k)`: the activation peak of `checkpoint_sequential` on n
#    Linear → ReLU blocks with k segments, in states — exactly, with the remainder of n / k
#    where PyTorch's semantics put it. Which k minimises it for n = 64?
# 2. `revolve_forwards(n_steps, slots)`: the fewest recomputed forwards, in closed form (work
#    it out from the schedule's recursion; `revolve` itself is off limits). How many slots make
#    revolve as cheap in time as sqrt(n) segments for n = 64?
# 3. `checkpoint_one(function, x)`: your own checkpoint `Function` for one input, keeping only
#    x for backward, with the RNG replay and the recomputation marked as one.
