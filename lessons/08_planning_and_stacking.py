# %% [markdown]
# # Lesson 8 — Planning memory before you run, and stacking the techniques
#
# Lessons 1-7 each attacked one bucket. A real run asks a different question: *here is my model,
# my batch and my GPU — which combination of techniques fits, and which of those is fastest?*
# `tinymem plan` answers it before anything trains (`tinymem/planner/`):
#
# - **model states by formula** (`planner/terms/states.py`), as DeepSpeed's
#   `estimate_zero*_model_states_mem_needs` and `accelerate estimate-memory` do: parameters,
#   gradients and optimizer state from the parameter shapes and each optimizer's own
#   bytes-per-parameter formula (`optim/table.py`);
# - **activations and workspace by a two-point probe** (`planner/measured/probe.py`): the real training
#   step, with the techniques applied, at micro-batches of 2 and 3 samples under the ledger, then
#   extrapolated linearly to the real size — event by event, so the prediction is the ledger's
#   own peak, not an estimate of it;
# - **a coarse time model** (`planner/report/timing.py`) calibrated on this machine, to rank what fits.
#
# Then we stack the techniques on one model until a run that does not fit at fp32 + Adam trains
# in a quarter of the memory (`planner/measured/stack.py`, figure `stack_waterfall.png`).

# %%
import math

import tinymem as tm
from tinymem import memory, optim, planner
from tinymem.experiments import stack as experiment
from tinymem.planner.measured.recipe import Combination
from tinymem.measure.records import read_records
from tinymem.planner.terms.states import buffer_bytes, model_states, parameter_shapes
from course import FIGURES, OUT, QUICK, RECORDS, check, predict, reveal

tm.manual_seed(0)

# %% [markdown]
# ## 1. Model states: a formula is enough
#
# Weights, their gradients and the optimizer's state depend only on the parameter shapes and
# the choices made: the precision of the stored weights (half precision adds fp32 masters,
# lesson 2), the optimizer (lesson 5), where its state lives (lesson 4). No run is needed —
# exercise 1 writes the formula; here are the planner's answers, per parameter:

# %%
work = planner.workload("mlp", "64,256,256,10")
model = work.build("none")
shapes = parameter_shapes(model)
n = sum(math.prod(s) for s in shapes)
print(f"{work!r}: {n:,d} parameters")
per_param = {}
for precision, optimizer, offload in [("fp32", "Adam", "none"), ("bf16", "Adam", "none"),
                                      ("fp32", "Adam8bit", "none"), ("fp32", "Adam", "optimizer")]:
    states = model_states(shapes, Combination("none", precision, optimizer, offload, 1), buffer_bytes(model))
    per_param[precision, optimizer, offload] = {b: v / n for b, v in states.items()}
    print(f"  {precision} {optimizer:<9} offload={offload:<9} " +
          "  ".join(f"{b} {v / n:5.2f} B/param" for b, v in states.items()) + f"  total {sum(states.values()) / n:5.2f}")
del model  # a budget counts every device byte of the process: let this one go

# %% [markdown]
# ## 2. Activations: probe twice, extrapolate every event
#
# Activations depend on everything: the model's ops, the checkpoint schedule, what half
# precision stores, whether saved tensors leave the device. Rather than a formula per case, the
# planner runs the *real* step — techniques applied — at 2 and then 3 samples per micro-batch
# and records the ledger's timeline. Both runs make the same allocations in the same order, and
# in these models every array is either batch-independent or has the batch as its first
# dimension, so at every event each bucket holds c + a·m bytes — and two runs are enough to
# know c and a (exercise 2 does the rest). (Why not 1 and 2 samples? A batch of one is a
# degenerate shape: a transposed (1, C, H, W) array is already contiguous, an op skips a copy,
# and the two runs no longer line up.)
#
# A third run at 5 samples checks the extrapolation (`probe.CHECK`); a probe that fails it is
# redone once, and then reported as not exact rather than trusted.
#
# Beware: the peak at 2 samples and the peak at 512 need not happen at the same moment of the
# step (a weight-sized temporary of the optimizer at one size, the activations at the end of the
# forward pass at the other). Exercise 2 asks what that means for the extrapolation.
#
# Here is the check the tests run, on every model of `models.py`:

# %%
CASES = [("mlp", "32,64,64,64,10", Combination("sqrt", "fp32", "Adam", "none", 1)),
         ("unet", "1,3,4,3,16", Combination("block", "bf16", "Adam8bit", "none", 2)),
         ("transformer", "32,16,16,2,2", Combination("none", "fp32", "Adafactor", "activations", 1))]
batch = 8 if QUICK else 16
for name, sizes, combo in CASES:
    w = planner.workload(name, sizes)
    prediction = planner.predict(planner.run_probe(w, combo), batch)
    measured = planner.measure_step(w, combo, batch)
    error = (prediction.total - measured["ledger"]) / measured["ledger"]
    print(f"{name:<12} {planner.describe(combo):<45} predicted {prediction.total:>9,d} B  "
          f"ledger {measured['ledger']:>9,d} B  error {error:+.2%}  (peak in {prediction.phase})")

# %% [markdown]
# The probe is exact here, not "within 5%" (at worst a few hundred bytes off, where a small
# array is freed one event earlier at one probe size than at the other). Where would it stop
# being exact? A convolution
# builds its column matrix in blocks of at most `WORKSPACE_ELEMENTS`; once one block no longer
# holds the whole micro-batch its workspace stops growing, and the prediction becomes an upper
# bound. And the probe measures the ledger: how close the ledger is to the allocator is the
# ledger's own test (`tests/memory/test_memory.py`); `--verify` prints both.
#
# ## 3. The plan
#
# Every combination of checkpoint schedule x precision x optimizer x offload x micro-batches
# (those that compose), its predicted peak per bucket, whether it fits, its predicted time:

# %%
from tinymem.cli import print_table  # noqa: E402

result = planner.plan("mlp", "64,256,256,256,10", batch_size=64 if QUICK else 256, budget=None,
                      schedules=("none", "sqrt"), precisions=("fp32", "bf16"),
                      optimizers=("Adam", "Adam8bit"), offloads=("none", "optimizer"))
needs = sorted(r.prediction.total for r in result.rows)
result = planner.with_budget(result, needs[len(needs) // 4])  # a budget a quarter of them meet
predict("the table below has a gradient column. Will the rows with micro-batches (k > 1) hold more "
        "gradient bytes at their peak than the same row at k = 1? Which arrays would make the difference?")
print_table(planner.table_rows(result, top=8))
print(planner.summary(result))
by_combo = {tuple(r.combo): r.prediction.by_bucket["gradient"] for r in result.rows}
one = ("none", "fp32", "Adam", "optimizer", 1)
k = min(c[4] for c in by_combo if c[:4] == one[:4] and c[4] > 1)
weights = [p.nbytes for p in result.workload.build("none").parameters()]
all_grads, largest = sum(weights), max(weights)
reveal(f"gradient bucket at the peak: k = 1 {by_combo[one]:,d} B, k = {k} {by_combo[one[:4] + (k,)]:,d} B; "
       f"every gradient together is {all_grads:,d} B, the largest weight's {largest:,d} B",
       f"at k = {k} the peak holds every gradient exactly once; at k = 1 it falls mid-backward, before every "
       "gradient exists",
       by_combo[one[:4] + (k,)] == all_grads and by_combo[one] < all_grads)
measured = planner.measure_step(result.workload, result.proposal.combo, result.batch_size, budget=result.budget)
print_table(planner.verify_rows(result, measured))

# %% [markdown]
# Why? From the second micro-batch on, a new gradient is *added* into `.grad` in place
# (`grad += g` in `tinymem/autograd/engine.py`, as PyTorch accumulates), so no weight ever has
# two gradient arrays: at k > 1 the peak holds every gradient once, all made by the first
# micro-batch. At k = 1 the peak falls inside the one backward, when only part of the gradients
# have been made. The difference is one of timing, not of extra arrays. (An out-of-place sum,
# `grad = grad + g`, would hold the old and the new array of one weight at once: the largest
# weight's gradient again, on top.)
#
# The same from the shell, with a budget and the check:
#
#     python -m tinymem plan --model mlp --sizes 64,1024,1024,10 --batch 512 --budget 8MB --verify
#
# The time model is coarse on purpose: forward + backward as three forwards, plus the share of
# the forward that checkpointing recomputes, times the measured slowdown of half precision on
# this machine, plus one measured optimizer step, plus the bytes offload copies at the
# measured memcpy bandwidth. It ranks; `--verify` measures.
#
# ## 4. Stacking
#
# One MLP, mostly activations at its batch size. Each stage adds one technique to the previous:

# %%
records = experiment.run(quick=True)
records["meta"] = RECORDS["meta"]
for s in records["stages"]:
    print(f"{s['label']:<28} peak {s['ledger'] / 2**20:6.2f} MiB   step {1e3 * s['seconds']:6.1f} ms")
print(f"{records['reduction']:.1f}x less than fp32 + Adam; under a budget of a quarter of it the plain run "
      f"fails with: {records['plain_under_budget']}")
losses = records["stacked_losses"]
print(f"the stacked run takes {len(losses)} steps under it, loss {losses[0]:.4f} -> {losses[-1]:.4f}")
print("wrote", experiment.plot(records, OUT))
adam, adam8 = per_param["fp32", "Adam", "none"]["optimizer"], per_param["fp32", "Adam8bit", "none"]["optimizer"]
print(f"Adam8bit keeps {adam8:.2f} of Adam's {adam:.2f} optimizer bytes per parameter (section 1)")
plain_stage, eight_bit = records["stages"][0], records["stages"][1]
raised = eight_bit["ledger"] > plain_stage["ledger"]
print(f"on this stacked model Adam keeps {plain_stage['by_bucket']['optimizer']:,d} B of state; 8-bit Adam "
      f"{eight_bit['by_bucket']['optimizer']:,d} B, of which {optim.Adam8bit.MAP_BYTES:,d} B are its fixed maps: "
      f"the stage {'raises' if raised else 'lowers'} the peak")
others = [b for b in memory.BUCKETS if b != "optimizer"]
check("the Adam8bit stage changes only the optimizer bucket, so it raises the peak exactly when 8-bit Adam's "
      "state, maps included, outweighs Adam's",
      all(eight_bit["by_bucket"][b] == plain_stage["by_bucket"][b] for b in others)
      and raised == (eight_bit["by_bucket"]["optimizer"] > plain_stage["by_bucket"]["optimizer"]))
full = read_records(FIGURES, "stack")["stages"]
print(f"the committed full run ({full[0]['by_bucket']['optimizer']:,d} B of Adam state): "
      + ", ".join(f"{s['label']} {s['ledger'] / 2**20:.2f} MiB" for s in full))

# %% [markdown]
# Read the waterfall from left to right. Adam8bit keeps a fraction of Adam's optimizer bytes
# per parameter, plus fixed maps of its own: on a model as small as this one the maps outweigh
# the saving and the stage *raises* the peak (the lines above say by how much, and the committed
# full run, with a larger model, shows the stage lowering it). The stacked run *runs* under a quarter of the budget;
# its few steps at a small rate only show that — its loss barely moves, and whether it learns
# as well as the plain run is lesson 5's question, not this figure's. Checkpointing with
# sqrt(n) segments keeps the segment inputs and recomputes one segment at a time. Micro-batches divide what is left of the activations by k and cost k smaller steps.
# Moving the optimizer state to the host takes the last optimizer bytes off the device and adds
# the traffic of every gradient down and every weight up.
#
# ## Pitfalls
#
# - **Per-block checkpointing of an MLP saves little**: a ReLU's saved output *is* the next
#   Linear's saved input; the ledger counts it once. Segments of several blocks (sqrt) do save.
# - **Half precision is not a model-state saving**: with fp32 masters it is 16 bytes per
#   parameter with Adam, as fp32; it halves the saved activations.
# - **Techniques do not always compose**: half precision and activation offload are both
#   saved-tensor hooks and the innermost wins; the planner does not offer the pair.
# - **Micro-batches are not free**: each pays the per-call overhead, and a layer that mixes
#   samples (BatchNorm) sees smaller batches (lesson 6).
# - **A prediction is for one step after the first**: the first step also creates the optimizer
#   state; the probe and `--verify` both take a warm-up step.
#
# ## Exercises (`lessons/exercises/ex08.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_08`)
#
# 1. `model_state_bytes(shapes, precision, optimizer, offload)`: the three model-state buckets
#    by formula, for five optimizers, three precisions and optimizer offload.
# 2. `extrapolated_peak(rows_a, rows_b, phases, m_a, m_b, m)`: the probe's extrapolation, with
#    the split by bucket and the phase of the peak. The check compares it with a real step.
# 3. `propose(rows, budget)`: the fastest row that fits, the smaller one on a tie.
# 4. `micro_batches_needed(fixed, per_sample, batch, budget)`: the fewest micro-batches (a power
#    of two dividing the batch) that fit.
# 5. Think: the planner proposes the fastest combination that fits. When would you rather take
#    a slower one that leaves more room under the budget?
