# %% [markdown]
# # Lesson 12 — Planning past the machine
#
# The question every large run starts with: *what does it take to train GPT-3 175B, or a 7B
# model, on my GPUs?* No two-core laptop trains either. But the memory of a training step
# follows from formulas, and those formulas can be checked to the byte on models that do train
# here. This lesson builds the closed form (`tinymem/planner/terms/analytic.py` and the files it
# names), holds it against the ledger of tinymem's own `TransformerLM`, compares it with what
# Korthikanti et al. (2022) and the ZeRO paper (Rajbhandari et al., 2020) count, and then
# asks it about GPT-3.
#
# The probe of lesson 8 runs the real step at two small sizes and extrapolates; it cannot
# reach 10⁹ parameters. The closed form needs only the shapes:
#
# | file | what it holds |
# | --- | --- |
# | `planner/model/architectures.py` | GPT-2/3 and LLaMA shapes, parameter counts |
# | `planner/terms/activations.py` | every saved tensor of one layer, in tinymem's count and the paper's |
# | `planner/terms/sharding.py` | model states per rank: ZeRO 1-3, data parallel, offload, pipelines |
# | `planner/terms/moments.py` | the moments where a step can peak |
# | `planner/terms/analytic.py` | `breakdown()`: every bucket of one step, per GPU |
# | `planner/search/fits.py` | technique stacks on N GPUs: which fit, the fewest GPUs, the time |
# | `planner/measured/exactness.py` | the closed form against the ledger, on a real step |

# %%
import json
import os

import tinymem as tm
from tinymem.cli import print_table
from tinymem.experiments import what_fits as experiment
from tinymem.measure.records import meta
from tinymem.planner import activations, analytic, architectures, exactness, fits
from tinymem.planner.terms.analytic import Stack

QUICK = os.environ.get("TINYMEM_QUICK") == "1"
from course import OUT, check, predict, reveal  # OUT: where figures go (lessons/out/, git-ignored)
tm.manual_seed(0)


def gb(x):
    return f"{x / 1e9:,.1f} GB"


# %% [markdown]
# ## 1. One layer, saved tensor by saved tensor
#
# Read `TransformerBlock.forward` (`models/transformer.py`) with the ops it calls open beside
# it. Each op saves only what its backward needs (`ops/layers.py`, `ops/attention.py`):
# LayerNorm its normalised input and 1/std, each Linear its input, GELU its input, plain
# attention q, k, v and the weights softmax(qkᵀ). Count them for one layer with N = b·s tokens,
# width h, a heads and an MLP of 4h (exercise 1 asks for the formula; do it on paper first).

# %%
s, b, h, a = 16, 4, 32, 2
predict(f"one block with s = {s}, b = {b}, h = {h}, a = {a}, MLP 4h, fp32: how many bytes does it save "
        "for backward?")

# %%
closed = activations.activations_per_layer(s, b, h, a)
one, two = (exactness.measure((64, s, h, a, layers), b, Stack())["buckets"]["activation"] for layers in (1, 2))
reveal(f"one layer: {closed:,d} B in fp32 by the closed form; the ledger of a real step, two blocks minus one: "
       f"{two - one:,d} B", "the closed form counts one block's saved tensors to the byte", closed == two - one)

# %% [markdown]
# The storage hooks of lessons 2 and 3 change the bytes per value, not the list: fp16/bf16
# store 2 bytes, int8 1 byte plus 12 bytes per group of 256 (`compress_saved_activations`).
# Chunked attention (lesson 6) saves its output and one log-sum-exp per row instead of the
# a·b·s² weights. Full recomputation keeps the layer's input alone, in the compute dtype.
#
# ## 2. The whole step, and the ledger
#
# A step does not peak at "all activations". It peaks at one of a few moments (`moments.py`):
# the last layer has just produced its output, the loss is computed (the fp32 logits beside
# everything saved; with int8 storage, the loss packing its probabilities beside float32
# temporaries of their size, `packing_bytes`), the last checkpointed segment is being
# recomputed (with the gradients of the layers after it), or the optimizer updates (every
# gradient, the state, the update's temporaries). `breakdown` evaluates each and reports
# every bucket's own peak. Here it is
# against the ledger of a real step, for a few stacks:

# %%
sizes, batch = ((50, 8, 16, 2, 3), 4) if QUICK else ((64, 32, 48, 4, 4), 6)
rows = []
for name, stack in [("plain", Stack()), ("bf16 + sqrt segments", Stack("bf16", recompute="sqrt")),
                    ("int8 saved + full recompute", Stack(storage="int8", recompute="full")),
                    ("chunked + 2 micro-batches", Stack(attention="chunked", micro_batches=2)),
                    ("optimizer on the host", Stack(offload=True))]:
    predicted, measured = exactness.compare(sizes, batch, stack, chunk_size=4)
    bound = analytic.transient_bound(architectures.tinymem_lm(*sizes), batch, stack, "numpy")
    row = {"stack": name}
    for bucket in ("parameter", "gradient", "optimizer", "activation"):
        row[bucket[:5] + " diff"] = predicted.buckets[bucket] - measured["buckets"][bucket]
    row.update({"work diff": predicted.buckets["workspace"] - measured["buckets"]["workspace"],
                "peak (closed form)": predicted.peak, "peak (ledger)": measured["peak"],
                "peak gap": measured["peak"] - predicted.peak, "bound": bound, "at": predicted.moment})
    rows.append(row)
print(f"TransformerLM {sizes}, batch {batch}: closed form minus ledger, bytes")
print_table(rows)
check("parameters, gradients, optimizer state and activations agree to the byte",
      all(r[k] == 0 for r in rows for k in ("param diff", "gradi diff", "optim diff", "activ diff")))
check("the ledger's peak is the closed form's or above it, by at most the bound (peak gap <= bound)",
      all(0 <= r["peak gap"] <= r["bound"] for r in rows))

# %% [markdown]
# Four buckets agree to the byte: parameters, gradients (with the fp32 master gradients a half
# model makes during its step), optimizer state (from each optimizer's own formula,
# `optim/table.py`), activations. `tests/planner/test_analytic_exact.py` draws random sizes
# for 16 technique stacks and asserts this. The step's peak and the workspace do not: the
# closed form evaluates a few moments, and the ledger's peak is at one of them or a little
# above, never below, by at most a stated bound (`analytic.transient_bound`; the "peak gap"
# and "work diff" columns): between the modelled moments, an op's output lives beside its
# inputs, in backward an op's incoming gradient beside the gradients it returns and
# the op's own buffers (GELU's and LayerNorm's backward register theirs as workspace), and a
# residual array or two more than at the moment are alive.
#
# Two things the ledger cannot see, and neither does the closed form: the temporaries of an op
# that does not register them (softmax's gradient in attention backward), which the allocator
# sees; and, on a GPU, the CUDA context, the allocator's fragmentation and the communication
# buffers.
#
# ## 3. What the paper counts
#
# Korthikanti et al. count a Megatron GPT layer in 16-bit with dropout: s·b·h·(34 + 5·a·s/h)
# bytes. `mode="korthikanti"` lists their terms; for GPT-3 175B (s = 2048, h = 12288,
# a = 96, one sequence) and t = 8 tensor-parallel ranks, the rows of their table:

# %%
arch = architectures.get_arch("gpt3-175b")
sbh = arch.seq * arch.hidden
table = [{"configuration": r["configuration"], "x sbh": r["terms"] / sbh, "bytes per layer": gb(r["terms"]),
          "formula agrees": abs(r["terms"] - r["formula"]) <= 1e-9 * r["formula"]}
         for r in activations.korthikanti_table(arch.seq, 1, arch.hidden, arch.heads, tensor_parallel=8)]
print_table(table)

# %% [markdown]
# And tinymem's count of the same layer, stored in 16-bit, term by term beside theirs:

# %%
ours = {t.name: t.bytes for t in activations.layer_terms(arch.seq, 1, arch.hidden, arch.heads, storage="bf16")}
theirs = {t.name: t.bytes for t in activations.layer_terms(arch.seq, 1, arch.hidden, arch.heads, mode="korthikanti")}
pairs = [("LayerNorm inputs (2)", ["norm1 x-hat", "norm1 1/std", "norm2 x-hat", "norm2 1/std"]),
         ("attention: QKV input", ["attention projection input"]),
         ("attention: Q and K", ["attention q", "attention k"]),
         ("attention: V", ["attention v"]),
         ("attention: softmax output", ["attention weights"]),
         ("attention: softmax dropout mask", []), ("attention: softmax dropout output", []),
         ("attention: projection input", ["output projection input"]),
         ("attention: dropout mask", []), ("MLP: fc1 input", ["fc1 input"]),
         ("MLP: GELU input", ["GELU input"]), ("MLP: fc2 input", ["fc2 input"]), ("MLP: dropout mask", [])]
print_table([{"Korthikanti term": k, "theirs MB": f"{theirs[k] / 1e6:,.1f}",
              "tinymem MB": f"{sum(ours[n] for n in names) / 1e6:,.1f}",
              "difference MB": f"{(sum(ours[n] for n in names) - theirs[k]) / 1e6:+,.1f}"} for k, names in pairs])
print(f"per layer: theirs {gb(sum(theirs.values()))}, tinymem {gb(sum(ours.values()))}")

# %% [markdown]
# The differences are design choices you can point at in the source: tinymem's attention has
# no dropout (no mask, no dropout output: 3·a·s²·b bytes the paper keeps), its blocks have no
# residual dropout and the MLP dropout is off by default (no 1-byte masks), and LayerNorm keeps
# its normalised input plus a 1/std per token instead of its input. Selective recomputation
# removes the a·s² terms in both counts; tinymem's checkpoint has no policy to keep everything
# but the attention core yet, so that term of the tinymem mode is a formula, not a measurement.
# The paper's mode counts a LLaMA layer by the paper's own rules (no dropout masks, SwiGLU's
# three matmuls, k and v for the grouped heads only); the tinymem mode counts it as the
# equivalent tinymem ops would save it.
#
# ## 4. Model states, and how ZeRO splits them
#
# Mixed-precision Adam: 2 bytes of half weights, 2 of half gradients, 12 of fp32 masters and
# moments. The ZeRO paper's example, a 7.5B model on 64 GPUs, per GPU:

# %%
for stage in range(4):
    states = analytic.model_states(7.5e9, stage, 64, "adam", "mixed")
    print(f"  ZeRO stage {stage}: {gb(sum(states.values()))}  " + "  ".join(f"{k} {gb(v)}" for k, v in states.items()))

# %% [markdown]
# `tests/planner/test_analytic_partition.py` checks these terms against real MPI runs at 2 and
# 4 ranks, padding included (ZeRO pads each flat unit to a multiple of N), and the activations
# a pipeline stage holds: GPipe keeps all m micro-batches, 1F1B stage i keeps min(p - i, m).
# One tinymem detail: `MasterOptimizer` makes 4 bytes per parameter of fp32 master gradients
# during the step, so tinymem's mixed precision peaks at 2 + 2 + 4 + 12 = 20 bytes per
# parameter in the optimizer step, not 16 (`convention="zero-paper"` counts the paper's 16;
# `mode` only chooses how the activations are counted: section 7 compares the conventions).
#
# ## 5. GPT-3 175B on 8 x 80 GB
#
# Each stack adds one technique to the one before (`fits.stacks`), then two pipelines:

# %%
n = architectures.parameter_count(arch)
print(f"{n:,d} parameters; at 16 bytes each: {gb(16 * n)} of model states")
rows, proposal = fits.plan_arch(arch, 8, 80e9)
print_table(fits.table(rows, 8, 80e9))
print(fits.summary(arch, rows, proposal, 8, 80e9))
print("GPU rates assumed (FLOP/s):", {k: f"{v / 1e12:.0f}T" for k, v in fits.GPU_FLOPS.items()})
print()
print("the same, activations counted as Korthikanti et al. count them, model states as the ZeRO paper does:")
k_rows, _ = fits.plan_arch(arch, 8, 80e9, mode="korthikanti", convention="zero-paper")
print_table([{"stack": r.name, "peak GB": f"{r.breakdown.peak / 1e9:.1f}", "fewest GPUs": r.fewest_gpus or "-"}
             for r in k_rows])

# %%
plain, mixed = rows[0].breakdown, rows[1].breakdown
states = {r.name: sum(r.breakdown.buckets[k] for k in ("parameter", "gradient", "optimizer")) for r in rows[:2]}
print(f"model states per GPU: {rows[0].name} {gb(states[rows[0].name])}, {rows[1].name} {gb(states[rows[1].name])} "
      f"({states[rows[1].name] / n:.0f} B per parameter); activations {gb(plain.buckets['activation'])} -> "
      f"{gb(mixed.buckets['activation'])}")
check(f"mixed precision halves the activations and raises the peak, {gb(plain.peak)} -> {gb(mixed.peak)} "
      f"(20 B per parameter, not 16)",
      mixed.buckets["activation"] <= 0.51 * plain.buckets["activation"] and mixed.peak > plain.peak
      and round(states[rows[1].name] / n) == 20)

# %% [markdown]
# Read the table from the top. Plain data parallelism keeps all 16 bytes per parameter on every
# GPU (the model states printed above): no count of GPUs helps. Mixed precision halves the
# activations, but tinymem's model states grow to 20 bytes per parameter in the optimizer step
# (section 4), so the peak rises. ZeRO-3 divides the model states by the GPU count, so some
# count fits; moving the optimizer state to the host lowers it further, at the price of the PCIe traffic
# in the time column. The time column is a model (`fits.relative_time`): recomputation costs
# its extra forward, offload its transfers and host update, a pipeline its bubble; data
# parallel communication is assumed hidden. Its rates are an A100's (`fits.GPU_FLOPS`, printed
# above): bf16's x0.50 is that GPU's 2:1 ratio of bf16 to TF32 tensor-core throughput, and
# another GPU has another ratio.
#
# The same from the shell:
#
#     python -m tinymem plan --arch gpt3-175b --gpus 8 --gpu-memory 80GB
#     python -m tinymem plan --arch llama-7b --gpus 1 --gpu-memory 24GB
#     python -m tinymem plan --layers 24 --hidden 2048 --heads 16 --seq 2048 --vocab 50257 --gpus 4
#
# ## 6. The figure
#
# Left, every model against four GPU sizes (8 GPUs each), coloured by the cheapest stack that
# fits; right, one GPT-3 175B step per stack.

# %%
records = experiment.run(quick=True)
records["meta"] = meta("cpu", True)
print(experiment.plot(records, OUT))
committed = os.path.join(os.path.dirname(os.path.abspath(experiment.__file__)), "..", "..", "figures", "data",
                         "what_fits.json")
if os.path.exists(committed):
    with open(committed) as f:
        full = json.load(f)
    cell = next(c for c in full["grid"] if c["model"] == "gpt3-175b" and c["memory_gb"] == 80)
    print(f"committed figure: GPT-3 175B needs {cell['fewest_gpus']} GPUs of 80 GB ({cell['fewest_stack']})")

# %% [markdown]
# ## Pitfalls
#
# - **"It fits" is a lower bound on what you need.** The closed form counts what tinymem's
#   ledger counts; a real GPU also holds the CUDA context, fragmentation, NCCL buffers and the
#   allocator's caching. Leave room.
# - **Activations scale with the micro-batch and the sequence**, model states do not. Doubling
#   the sequence quadruples the a·b·s² term of plain attention; chunked attention removes it.
# - **The paper's count is not your framework's.** Dropout masks, what LayerNorm keeps, fused
#   kernels and fp32 master gradients move the numbers by tens of percent: count your own ops.
# - **Recomputation schedules differ**: `checkpoint_sequential` runs its last segment plainly,
#   Megatron's full recomputation checkpoints every layer. One layer of difference, unless many
#   micro-batches wait on a pipeline stage.
#
# ## 7. Three ways to count the same model states
#
# `tinymem plan --convention tinymem|deepspeed|zero-paper --explain` prints the model states of
# a stack as rows: bytes per parameter, divided by how many ranks, and where they live. LLaMA-2
# 70B with bf16, full recomputation and ZeRO-3 on 64 GPUs, in each convention:

# %%
from tinymem.planner import conventions

llama = architectures.get_arch("llama2-70b")
zero3 = Stack("bf16", recompute="full", zero=3, ranks=64)
for convention in conventions.CONVENTIONS:
    table = conventions.rows(llama, zero3, convention)
    print(f"{convention}: {gb(conventions.device_bytes(table))} per GPU")
    print_table([{"term": r.term, "B/param": r.per_parameter, "divided by": r.divisor,
                  "GB": f"{conventions.row_bytes(r) / 1e9:.2f}", "where": r.place} for r in table])

# %% [markdown]
# Term by term:
#
# - **Weights, fp32 masters, Adam's m and v** (2 + 4 + 8 bytes): the same in all three.
# - **Half gradients**: tinymem and the paper keep 2 bytes per parameter (divided from ZeRO-2
#   on). DeepSpeed's ZeRO-3 estimator counts none: it reduces each layer's half gradients into
#   its fp32 shard as backward makes them. Its ZeRO-2 estimator shards them with the rest
#   (DeepSpeed PR #5099); at stage 1 they stay whole.
# - **fp32 gradients**: tinymem's `MasterOptimizer` makes 4 bytes per parameter of them for the
#   step (a rank its own shard from ZeRO-1 on); DeepSpeed counts its fp32 gradient partition,
#   4 bytes too; the paper's K = 12 has masters and moments only, so it counts none.
# - **What is in flight**: tinymem's ZeRO-3 gathers one layer's weights, and holds one layer's
#   full gradient and its flat copy while it reduce-scatters them; DeepSpeed adds 4 bytes per
#   parameter of its largest module (for a LLaMA, the token table or the head), half weights
#   and half gradients; the paper counts nothing in flight.
#
# Which one a tinymem run measures: the `tinymem` convention. Its terms are held to the ledger
# of real runs (`tests/planner/test_analytic_partition.py` under MPI, `test_analytic_exact.py`
# on one machine). Use `deepspeed` to compare with what DeepSpeed's estimator prints for a
# DeepSpeed job (`tests/planner/test_conventions.py` reproduces it within 0.1%), and
# `zero-paper` to read the paper's table.
#
# ## Exercises (`lessons/exercises/ex12.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_12`)
#
# 1. `layer_activation_bytes(seq, batch, hidden, heads, bytes_per_value)`: derive the saved
#    bytes of one tinymem block (plain attention, MLP 4h, no dropout). The check compares it
#    with the closed form at random sizes and with the ledger: a second block adds exactly it.
# 2. `fewest_gpus(params, bytes_per_param, fixed_bytes, gpu_memory)`: the fewest GPUs for
#    ZeRO-3-style sharding of the model states beside a fixed activation and workspace cost.
# 3. `first_stack_that_fits(arch, gpus, gpu_memory, stacks)`: walk the stacks of
#    `fits.stacks` and return the first whose predicted step fits. Which stack does a 7B model
#    need on 8 x 80 GB? On one 24 GB GPU?
# 4. Think: the plan proposes the fastest stack that fits. Why might you still choose full
#    recomputation when selective would fit, for a model you will later train on longer
#    sequences?
