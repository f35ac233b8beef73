# %% [markdown]
# # Lesson 14 — Predicting a PyTorch step
#
# Lessons 0 to 13 predicted tinymem's own steps, to the byte. Most people who ask "will this
# step fit?" train with PyTorch. Here you predict a real PyTorch step — nanoGPT's GPT, AdamW,
# fp32, on this CPU — with the formulas you have learned, measure it, and find the bytes the
# formulas forget.
#
# | file | what it holds |
# | --- | --- |
# | `measure/torch_models.py` | a nanoGPT-style GPT (and a LLaMA) in PyTorch, and one training step |
# | `measure/torch_step.py` | the measurement: the profiler's allocations replayed, the buckets at the peak |
# | `planner/terms/torch_step.py`, `torch_ops.py` | the planner's `torch` mode: PyTorch's step, op by op |

# %%
import json
import os

from tinymem.cli import print_table
from tinymem.measure import torch_models
from tinymem.measure.torch_step import measure_torch_step
from tinymem.planner.inputs import Stack, TorchOptions
from tinymem.planner.model.architectures import Arch, parameter_count
from tinymem.planner.search import fits
from tinymem.planner.terms import torch_step

from course import FIGURES, QUICK, check, predict, reveal

layers, hidden, heads, seq, vocab, batch = (1, 32, 2, 32, 512, 2) if QUICK else (2, 64, 4, 128, 2048, 4)
arch = Arch("nanoGPT", layers, hidden, heads, seq, vocab, tied=True)  # GPT-2's layout, the head tied to the table
n, N = parameter_count(arch), batch * seq


def mb(x):
    return f"{x / 1e6:.3f} MB"


print(f"nanoGPT: {layers} layers, h = {hidden}, {heads} heads, s = {seq}, V = {vocab}, batch {batch}: "
      f"{n:,d} parameters, N = {N} tokens a step")

# %% [markdown]
# ## 1. Predict with what you know
#
# fp32 with AdamW: 4 bytes a parameter of weights, 4 of gradients, 8 of the two moments. The
# activations, lesson 12's list: each block's saved tensors, then the logits and the
# loss's probabilities. tinymem's closed form adds them at the moments a step can peak, and it
# matches tinymem's own ledger to the byte. Use it (or your own sum) for the PyTorch step: the
# peak of the second step, when AdamW's state exists.

# %%
predict("the peak of this nanoGPT step in PyTorch, in MB, by the formulas of lessons 7 and 12?")
formula = fits.run(arch, batch, Stack("fp32", "Adam"))

# %% [markdown]
# ## 2. Measure it
#
# `torch_models.build` makes the model, its AdamW and `step()`: forward, loss, backward,
# `optimizer.step()`, `zero_grad()`; `step()` returns the logits, as nanoGPT's
# `logits, loss = model(X, Y)` leaves them with the caller. `measure_torch_step` runs two steps
# and replays the second's allocations from the profiler onto what is alive when it starts.

# %%
run = torch_models.build(arch, batch)
measured = measure_torch_step(run.step, model=run.model, optimizer=run.optimizer, steps=2, inputs=run.inputs)
reveal(f"measured {mb(measured.peak)}, in {measured.phase_at_peak} at {measured.op_at_peak}; the formulas said "
       f"{mb(formula.peak)} (at '{formula.moment}'): {formula.peak / measured.peak:.2f} of it",
       "the formulas predict less than PyTorch's step holds", formula.peak < measured.peak)
print_table([{"bucket": b, "measured at the peak": v} for b, v in measured.buckets.items()])
check("the peak is in backward, where log_softmax's backward writes its gradient",
      measured.phase_at_peak == "backward" and "log_softmax_backward" in measured.op_at_peak)

# %% [markdown]
# ## 3. The bytes the formulas forget
#
# PyTorch's `cross_entropy` is `nll_loss(log_softmax(logits))`. `log_softmax` saves its fp32
# output, N × V values, for its backward. In backward, `nll_loss` writes dlogp (N × V); then
# `log_softmax`'s backward writes dlogits (N × V) while dlogp and the saved output are still
# alive. And the logits the caller holds are still there too. tinymem's own loss keeps one
# N × V array at its moment: its backward writes the gradient into the probabilities it saved.

# %%
predict(f"how many bytes of N x V float arrays (N = {N}, V = {vocab}) are alive when log_softmax's backward "
        "writes dlogits, the logits held by the caller?")

# %%
mode = torch_step.breakdown(arch, batch, TorchOptions())
loss_terms = [(bucket, t) for bucket, t in mode.moment_terms["loss backward"] if t.formula == "4·N·V"]
print_table([{"tensor": t.name, "bucket": bucket, "formula": t.formula, "bytes": t.bytes} for bucket, t in loss_terms])
ce = sum(t.bytes for _, t in loss_terms)
reveal(f"{ce:,d} B: {ce // (4 * N * vocab)} arrays of 4·N·V bytes",
       "four N x V float arrays are alive in the cross-entropy backward: 16·N·V bytes", ce == 16 * N * vocab)

# %% [markdown]
# The planner's `torch` mode writes PyTorch's step op by op (`planner/terms/torch_ops.py`):
# what each op makes, saves and frees, the cross-entropy moment in one place
# (`Step.loss_backward`), and the smaller terms — SDPA's saved output, LayerNorm's mean and
# rstd, CPU dropout's float noise, the tied table's out-of-place gradient sum, AdamW's
# temporaries per implementation. Held against the measurement, bucket by bucket:

# %%
print_table([{"bucket": b, "torch mode": mode.buckets.get(b, 0), "measured": measured.buckets.get(b, 0)}
             for b in torch_step.BUCKETS] + [{"bucket": "peak", "torch mode": mode.peak, "measured": measured.peak}])
check("the torch mode predicts the measured peak within 1%", abs(mode.peak / measured.peak - 1) <= 0.01)

# %% [markdown]
# ## 4. Drop the logits
#
# A training loop that does not keep the logits (`_, loss = model(x, y)` inside a function
# that returns only the loss) frees them once the loss has its input.

# %%
predict("how much lower is the peak when the caller does not hold the logits, in units of 4·N·V bytes?")
dropped = torch_models.build(arch, batch, hold_logits=False)
lower = measure_torch_step(dropped.step, model=dropped.model, optimizer=dropped.optimizer, steps=2,
                           inputs=dropped.inputs)
reveal(f"{mb(measured.peak - lower.peak)} lower: {(measured.peak - lower.peak) / (4 * N * vocab):.2f} x 4·N·V",
       "dropping the held logits lowers the peak by exactly one N x V float array",
       measured.peak - lower.peak == 4 * N * vocab)

# %% [markdown]
# ## 5. The figure: every count against the measurement
#
# `tinymem figures --only torch_conventions` measures configurations spanning 100x in parameters
# (dropout, SDPA, AdamW's for-loop, foreach and fused among them) and holds five counts against each:
# tinymem's, DeepSpeed's and the ZeRO paper's conventions, Korthikanti et al.'s mode, and the
# torch mode. The committed records:

# %%
path = FIGURES / "data" / "torch_conventions.json"
if os.path.exists(path):
    with open(path) as f:
        rows = json.load(f)["rows"]
    spread = {}
    for row in rows:
        for name, p in row["predicted"].items():
            spread.setdefault(name, []).append(p["peak"] / row["measured"]["peak"])
    print(f"{len(rows)} configurations, {min(r['parameters'] for r in rows):,d} to "
          f"{max(r['parameters'] for r in rows):,d} parameters; predicted / measured peak:")
    print_table([{"count": name, "lowest predicted/measured": f"{min(v):.3f}", "highest": f"{max(v):.3f}"}
                 for name, v in spread.items()])
    check("in the committed run only the torch mode is within 1% on every configuration",
          [name for name, v in spread.items() if max(abs(x - 1) for x in v) <= 0.01] == ["torch"])
print(f"the cross-entropy backward of GPT-2 (V = 50,257) at N = 8,192 tokens: 16·N·V = {16 * 8192 * 50257 / 1e9:.1f} GB")

# %% [markdown]
# ## Pitfalls
#
# - **A framework's formulas are its own.** The saved tensors were right (lesson 12's count
#   matches what autograd saves, without dropout and with math attention); what is missing is
#   how PyTorch *executes* the step: the gradients of the loss, out-of-place sums, optimizer
#   temporaries.
# - **The vocabulary is the multiplier.** 16·N·V bytes grow with the tokens of a micro-batch
#   times the vocabulary (GPT-2's below): a micro-batch that fits by lesson 12's count can run
#   out of memory in the loss's backward.
# - **On a GPU, other bytes.** Dropout saves a 1-byte mask, the caching allocator rounds each
#   block up to 512 bytes, SDPA's flash kernels save a log-sum-exp instead of the s × s weights,
#   AdamW defaults to foreach. The torch mode predicts them for `device="cuda"`, and says it is
#   unmeasured until a GPU confirms it.
#
# ## Exercises (`lessons/exercises/ex14.py`, check with `TINYMEM_EXERCISES=student python -m pytest -m exercise_14`)
#
# 1. `cross_entropy_backward_bytes(tokens, vocab, hold_logits)`: the bytes of N × V float
#    arrays alive when `log_softmax`'s backward writes dlogits.
# 2. `adamw_temporary_bytes(sizes, implementation)`: the most bytes of temporaries AdamW's
#    update holds at once, for the parameters' sizes (values, in `model.parameters()` order)
#    and the implementation "for-loop", "foreach" or "fused". Read `torch/optim/adamw.py`'s
#    `_single_tensor_adamw` and `_multi_tensor_adamw`: which tensors does each make?
# 3. Think: a fine-tuning run of a 50k-vocabulary model peaks in the loss's backward. Which
#    change lowers that peak most: fewer layers, a smaller batch, or computing the loss in chunks
#    of the sequence?
